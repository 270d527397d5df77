"""Bytes per stored element of each dtype name of the problem format, without torch: the sizes of a workload's
tensors are needed before any process has imported torch (which takes seconds), e.g. to start a pool's workers
sooner. ``core.problem.dtypes`` maps the same names to torch dtypes; a test keeps the two in step."""

ELEMENT_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float4_e2m1fn_x2": 1,  # one byte holds two values
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
