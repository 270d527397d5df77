"""The outputs file between candidate and judge: every output comes back bit for bit, and a malformed or hostile
file is an ExchangeError, never a crash or a huge allocation."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from core.evaluate.exchange import ExchangeError, read_outputs, write_outputs


def test_outputs_come_back_bit_for_bit(tmp_path):
    produced = {
        "bf16": torch.randn(3, 5).to(torch.bfloat16),
        "fp8": torch.randn(4, 4).to(torch.float8_e4m3fn),
        "strided": torch.arange(12, dtype=torch.int32).reshape(3, 4).t(),
        "mask": torch.tensor([True, False, True]),
        "scalar_tensor": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 7, dtype=torch.float16),
        "count": 3,
        "ratio": 0.25,
        "note": "a string is not an output",
        "complex": torch.ones(2, dtype=torch.complex64),
    }
    path = tmp_path / "w0_s1.out"
    write_outputs(produced, path)
    back = read_outputs(path, "cpu")
    for name in ("bf16", "fp8", "strided", "mask", "scalar_tensor", "empty"):
        original = produced[name]
        assert back[name].dtype == original.dtype and back[name].shape == original.shape, name
        assert torch.equal(_bits(back[name]), _bits(original)), name
    assert back["count"] == 3 and back["ratio"] == 0.25
    assert back["note"] == "<str>"
    assert back["complex"] == "<tensor of torch.complex64>"


@pytest.mark.gpu
def test_gpu_outputs_come_back_bit_for_bit_through_the_staging_buffer(tmp_path):
    from core.evaluate import exchange

    generator = torch.Generator(device="cuda").manual_seed(7)
    produced = {
        # Larger than the staging buffer, and not a multiple of it: three chunks, the last one short.
        "large": torch.randn(exchange.STAGING_BYTES // 2 + 12345, generator=generator, device="cuda",
                             dtype=torch.float32),
        "strided": torch.arange(24, dtype=torch.int64, device="cuda").reshape(4, 6).t(),
        "on_cpu": torch.arange(10, dtype=torch.float16),
        "bf16": torch.randn(257, generator=generator, device="cuda").to(torch.bfloat16),
        "count": 5,
    }
    path = tmp_path / "w0_s1.out"
    size = write_outputs(produced, path)
    assert size == path.stat().st_size
    back = read_outputs(path, "cuda")
    for name in ("large", "strided", "on_cpu", "bf16"):
        original = produced[name].cuda()
        assert back[name].dtype == original.dtype and back[name].shape == original.shape, name
        assert torch.equal(_bits(back[name]), _bits(original)), name
    assert back["count"] == 5
    # A second write reuses the buffer; a smaller file is written whole, with nothing of the first left in it.
    write_outputs({"y": produced["bf16"][:5]}, path)
    assert torch.equal(read_outputs(path, "cpu")["y"], produced["bf16"][:5].cpu())


def _bits(tensor):
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _file(tmp_path, header, data: bytes = b"", length: int | None = None):
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    path = tmp_path / "hostile.out"
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


@pytest.mark.parametrize("header, data, length, message", [
    ({"outputs": {"y": {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}}}, b"\0" * 8, None,
     "outside the file"),
    ({"outputs": {"y": {"dtype": "float32", "shape": [1 << 40], "offset": 0, "nbytes": 16}}}, b"\0" * 16, None,
     "do not hold"),
    ({"outputs": {"y": {"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8}}}, b"\0" * 8, None,
     "unknown dtype"),
    ({"outputs": {"y": {"dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 4}}}, b"\0" * 4, None,
     "bad shape"),
    ({"outputs": {"y": {"value": [1, 2]}}}, b"", None, "not a number"),
    ({"outputs": []}, b"", None, "no outputs mapping"),
    (b"not json", b"", None, "not JSON"),
    ({"outputs": {}}, b"", 1 << 40, "out of range"),
])
def test_a_malformed_file_is_an_exchange_error(tmp_path, header, data, length, message):
    with pytest.raises(ExchangeError, match=message):
        read_outputs(_file(tmp_path, header, data, length), "cpu")


def test_a_truncated_file_is_an_exchange_error(tmp_path):
    path = tmp_path / "short.out"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(ExchangeError, match="truncated"):
        read_outputs(path, "cpu")
