"""A problem as content (core.cluster.content): packed on the head, written and loaded on a node under another path,
blobs shipped when small and found at the same paths when large, one clear error for what cannot travel. No Ray."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from cluster_problems import REFERENCE_RELU
from rows_problem import write_rows_problem
from safetensors.torch import save_file

from core.cluster.content import ProblemContent, node_problem, pack_problem
from core.cluster.errors import ContentError
from core.cluster.wire import verdict_from_dict
from core.evaluate.verdict import ErrorStats, Status, Timing, Verdict, WorkloadVerdict
from core.problem.load import load_problem


def _problem_with_blob(root: Path, blob_dir: Path, rows: int = 16) -> Path:
    """A rows problem whose second workload reads ``w`` from ``w.safetensors`` under ``blob_dir``."""
    folder = write_rows_problem(root / "cpu" / "scaled_relu", "scaled_relu", "x * w, then ReLU", REFERENCE_RELU,
                                rows=(rows, rows))
    lines = [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines()]
    lines[1]["inputs"]["w"] = {"type": "safetensors", "path": "weights/w.safetensors", "tensor_key": "w"}
    (folder / "workload.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (blob_dir / "weights").mkdir(parents=True)
    save_file({"w": torch.arange(64, dtype=torch.float32)}, str(blob_dir / "weights" / "w.safetensors"))
    return folder


def test_a_problem_travels_as_its_files_and_loads_elsewhere(tmp_path):
    folder = write_rows_problem(tmp_path / "head" / "cpu" / "scaled_relu", "scaled_relu", "x * w, then ReLU",
                                REFERENCE_RELU, rows=(64, 256))
    (folder / "solutions").mkdir()
    (folder / "solutions" / "seed.json").write_text("{}")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    content = pack_problem(load_problem(folder))
    assert set(content.files) == {"definition.json", "workload.jsonl", "solutions/seed.json"}
    assert content.available == (0, 1) and content.blobs == {} and content.blob_roots == ()
    assert pack_problem(load_problem(folder)).key == content.key  # equal content, equal key

    wire = content.to_wire()
    shutil.rmtree(tmp_path / "head")  # nothing on the node points into the head's disk
    loaded = node_problem(ProblemContent.from_wire(wire), tmp_path / "node")
    problem = loaded.problem
    assert problem.path.is_relative_to(tmp_path / "node" / content.key)
    assert problem.subset == "cpu" and problem.name == "scaled_relu" and len(problem.workloads) == 2
    assert (problem.path / "solutions" / "seed.json").read_text() == "{}"

    # A file changed on the node since (an unconfined candidate could) is written again at the next use.
    (problem.path / "definition.json").write_text("{}")
    again = node_problem(ProblemContent.from_wire(wire), tmp_path / "node")
    assert again.problem.definition.name == "scaled_relu"


def test_a_changed_problem_is_a_new_key(tmp_path):
    folder = write_rows_problem(tmp_path / "cpu" / "p", "scaled_relu", "x", REFERENCE_RELU, rows=(64,))
    first = pack_problem(load_problem(folder))
    (folder / "workload.jsonl").write_text((folder / "workload.jsonl").read_text().replace("64", "32"))
    assert pack_problem(load_problem(folder)).key != first.key


def test_small_blobs_travel_with_the_problem(tmp_path):
    blobs = tmp_path / "blobs"
    folder = _problem_with_blob(tmp_path / "head", blobs)
    content = pack_problem(load_problem(folder, [blobs]), [str(blobs)])
    assert list(content.blobs) == ["weights/w.safetensors"] and content.blob_roots == ()
    shutil.rmtree(blobs)
    loaded = node_problem(ProblemContent.from_wire(content.to_wire()), tmp_path / "node")
    assert loaded.problem.workloads[1].runnable
    assert loaded.problem.workloads[1].safetensors_files["w"].is_relative_to(tmp_path / "node")
    assert len(loaded.blob_roots) == 1 and Path(loaded.blob_roots[0]).is_relative_to(tmp_path / "node")


def test_large_blobs_stay_and_must_be_at_the_same_paths(tmp_path):
    blobs = tmp_path / "blobs"
    folder = _problem_with_blob(tmp_path / "head", blobs)
    content = pack_problem(load_problem(folder, [blobs]), [str(blobs)], max_blob_bytes=16)
    assert content.blobs == {} and content.blob_roots == (str(blobs.resolve()),)
    wire = content.to_wire()
    # Where the node has them at the same path, the workload runs there.
    loaded = node_problem(ProblemContent.from_wire(wire), tmp_path / "node")
    assert loaded.problem.workloads[1].safetensors_files["w"] == blobs.resolve() / "weights" / "w.safetensors"
    # Where it does not, the node says so rather than report the workload unavailable.
    shutil.rmtree(blobs)
    with pytest.raises(ContentError) as info:
        node_problem(ProblemContent.from_wire(wire), tmp_path / "other-node", node="gpu-box-2")
    message = str(info.value)
    assert "\n" not in message
    assert "workload 1 cannot run on gpu-box-2" in message and "same paths on every node" in message


def test_a_folder_too_large_to_travel_is_one_clear_error(tmp_path):
    folder = write_rows_problem(tmp_path / "cpu" / "p", "scaled_relu", "x", REFERENCE_RELU, rows=(64,))
    (folder / "notes.bin").write_bytes(b"x" * 4096)
    with pytest.raises(ContentError) as info:
        pack_problem(load_problem(folder), max_folder_bytes=2048)
    assert str(info.value) == (f"{folder}: its files (safetensors blobs aside) come to more than 2 KiB, "
                               "the most a problem's folder may take to the cluster's nodes; keep only the "
                               "problem's own files in its folder")


def test_verdicts_cross_as_plain_dicts_and_come_back_equal():
    verdict = Verdict(Status.INCORRECT_NUMERICAL, "workload 1: off", (
        WorkloadVerdict(0, Status.PASSED, "", ErrorStats(1e-6, 2e-6, 1.0, "out"), Timing(0.5, 0.01, 40, "events"),
                        {"run": 0.25}),
        WorkloadVerdict(1, Status.INCORRECT_NUMERICAL, "off", ErrorStats(1.0, 1.0, 0.5, "out"))),
        ("environment scrubbed of secrets",), 1.5)
    plain = json.loads(json.dumps(verdict.to_dict()))
    assert verdict_from_dict(plain) == verdict
