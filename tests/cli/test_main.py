"""The `kernelfleet` command's registry of subcommands: each module registers the command it is listed for, and a
command imports no other command's module."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_module_registers_the_command_it_is_listed_for(name):
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    importlib.import_module(COMMANDS[name]).register(commands)
    assert list(commands.choices) == [name]


def _loaded_after(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", "import sys\n" + code + "\nprint(' '.join(sorted(m for m in "
                           "sys.modules if m.startswith('cli.'))))"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_eval_imports_no_other_commands_module():
    loaded = _loaded_after("from cli.main import build_parser\n"
                           "build_parser(['eval', 'problem', '--solution', 's.json'])")
    others = {module for name, module in COMMANDS.items() if name != "eval"}
    assert COMMANDS["eval"] in loaded and not others & set(loaded), loaded


def test_help_and_an_unknown_command_list_every_command():
    help_text = subprocess.run([sys.executable, "-m", "cli.main", "--help"], cwd=ROOT, capture_output=True,
                               text=True, timeout=120).stdout
    unknown = subprocess.run([sys.executable, "-m", "cli.main", "evl"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert unknown.returncode == 2
    for name in COMMANDS:
        assert name in help_text and name in unknown.stderr, (name, help_text, unknown.stderr)
