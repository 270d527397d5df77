"""The ``edit_file`` tool: an exact replacement (the old text must occur once) or a unified diff applied with strict
context, through the tool registry as the agent calls it; and the text protocol's ```diff blocks."""

from __future__ import annotations

import anyio
import pytest

from core.llm.tools import Toolbox, Workspace, WorkspaceError, parse_text_reply, registry, tool_schemas

KERNEL = """#include <cuda_runtime.h>

extern "C" __global__ void scale(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = x[i] * 2.0f;
    }
}

extern "C" __global__ void shift(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = x[i] + 1.0f;
    }
}
"""


def _edit(args: dict, files: dict[str, str] | None = None):
    """The edit_file tool called as the agent calls it; (its result, the workspace after)."""
    workspace = Workspace(dict(files if files is not None else {"k.cu": KERNEL}))
    box = Toolbox(None, workspace, author="t")  # edit_file touches the workspace only
    return anyio.run(box.call, "edit_file", args), workspace


def test_edit_file_is_a_registered_tool_with_its_schema():
    assert "edit_file" in registry() and "write_file" in registry()
    (schema,) = [s["function"] for s in tool_schemas() if s["function"]["name"] == "edit_file"]
    assert set(schema["parameters"]["properties"]) == {"path", "old", "new", "diff"}
    assert schema["parameters"]["required"] == ["path"]


def test_exact_replacement():
    result, ws = _edit({"path": "k.cu", "old": "x[i] * 2.0f", "new": "x[i] * 3.0f"})
    assert result.failure is None and result.text.startswith("edited k.cu (")
    assert ws.files["k.cu"] == KERNEL.replace("x[i] * 2.0f", "x[i] * 3.0f")


def test_ambiguous_replacement_is_refused_saying_how_many_times():
    result, ws = _edit({"path": "k.cu", "old": "int i = blockIdx.x * blockDim.x + threadIdx.x;", "new": "int i = 0;"})
    assert result.failure.startswith("malformed tool call: edit_file: k.cu: old occurs 2 times in the file")
    assert "more of the surrounding text" in result.text and ws.files["k.cu"] == KERNEL


def test_missing_text_is_refused():
    result, ws = _edit({"path": "k.cu", "old": "x[i] * 5.0f", "new": "x[i]"})
    assert "old occurs 0 times in the file" in result.text and result.failure and ws.files["k.cu"] == KERNEL
    result, _ = _edit({"path": "nope.cu", "old": "a", "new": "b"})
    assert result.text == "error: no file 'nope.cu'; files: k.cu"


def test_bad_requests_are_refused():
    for args, message in [({"path": "k.cu"}, "give either old and new"),
                          ({"path": "k.cu", "old": "a", "new": "b", "diff": "@@ -1 +1 @@"}, "give either old and new"),
                          ({"path": "k.cu", "old": "a"}, "old and new must both be strings"),
                          ({"path": "../k.cu", "diff": "x"}, "'..' is refused"),
                          ({"path": "solution.json", "diff": "x"}, "solution.json cannot be edited"),
                          ({"path": "k.cu", "old": KERNEL, "new": ""}, "would leave the file empty")]:
        result, ws = _edit(args)
        assert message in result.text and result.failure, (args, result.text)
        assert ws.files == {"k.cu": KERNEL}


def test_a_unified_diff_applies_hunk_by_hunk():
    # Two hunks; the second's line numbers are off by 3 (models miscount): strict context still places it.
    diff = """--- a/k.cu
+++ b/k.cu
@@ -5,3 +5,3 @@
     if (i < n) {
-        out[i] = x[i] * 2.0f;
+        out[i] = __fmul_rn(x[i], 2.0f);
     }
@@ -16,4 +16,5 @@ extern "C" __global__ void shift(const float* x, float* out, int n) {
     int i = blockIdx.x * blockDim.x + threadIdx.x;
     if (i < n) {
-        out[i] = x[i] + 1.0f;
+        float v = x[i];
+        out[i] = v + 1.0f;
     }
"""
    result, ws = _edit({"path": "k.cu", "diff": diff})
    assert result.failure is None, result.text
    expected = (KERNEL.replace("out[i] = x[i] * 2.0f;", "out[i] = __fmul_rn(x[i], 2.0f);")
                .replace("        out[i] = x[i] + 1.0f;", "        float v = x[i];\n        out[i] = v + 1.0f;"))
    assert ws.files["k.cu"] == expected


def test_a_pure_insertion_goes_where_the_header_says():
    result, ws = _edit({"path": "k.cu", "diff": "@@ -1,0 +2,1 @@\n+#include <cstdint>\n"})
    assert result.failure is None and ws.files["k.cu"].splitlines()[:3] == [
        "#include <cuda_runtime.h>", "#include <cstdint>", ""]


def test_a_hunk_that_does_not_apply_is_refused_with_its_first_line_and_nothing_changes():
    diff = """@@ -5,3 +5,3 @@
     if (i < n) {
-        out[i] = x[i] * 2.0f;
+        out[i] = x[i] * 4.0f;
     }
@@ -13,3 +13,3 @@
     if (i < n) {
-        out[i] = x[i] - 1.0f;
+        out[i] = x[i] - 2.0f;
     }
"""
    result, ws = _edit({"path": "k.cu", "diff": diff})
    assert result.failure and "hunk 2 does not apply" in result.text
    assert result.text.rstrip().endswith("@@ -13,3 +13,3 @@")
    assert ws.files["k.cu"] == KERNEL  # the first hunk, which applied, is not kept either
    result, _ = _edit({"path": "k.cu", "diff": "just words, no hunk"})
    assert "the diff has no hunk" in result.text and result.failure


def test_text_replies_carry_diffs_in_diff_blocks():
    reply = parse_text_reply("Halve the work.\n```diff path=k.cu\n@@ -6 +6 @@\n-        out[i] = x[i] * 2.0f;\n"
                             "+        out[i] = x[i] + x[i];\n```\n```python path=main.py\nA = 1\n```\n")
    assert reply.files == (("main.py", "A = 1\n"),) and reply.blocks == 2 and reply.changes
    ((path, diff),) = reply.diffs
    ws = Workspace({"k.cu": KERNEL})
    ws.edit(path, diff=diff)
    assert "out[i] = x[i] + x[i];" in ws.files["k.cu"] and "* 2.0f" not in ws.files["k.cu"]
    assert not parse_text_reply("FINISH: done").changes
    with pytest.raises(WorkspaceError, match="hunk 1 does not apply"):
        ws.edit("k.cu", diff=diff)
