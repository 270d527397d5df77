"""Shared pieces of the evaluator tests (a uniquely named module: several test folders have a conftest)."""

import json

from core.evaluate import EvaluationPool, TimingPolicy
from core.evaluate.evaluate import evaluate_solution
from core.solution.io import parse_solution

REFERENCE = '''import torch

@torch.no_grad()
def run(x, weight, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)
'''

QUICK = TimingPolicy(warmup_calls=1, min_calls=5, max_calls=40, target_seconds=0.01, device_check_calls=3)


def python_solution(source: str, dps: bool = True, name: str = "candidate"):
    return parse_solution({
        "name": name, "definition": "rmsnorm_eval", "author": "tests",
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "destination_passing_style": dps},
        "sources": [{"path": "main.py", "content": source}],
    })


HONEST_DPS = '''import torch

def run(x, weight, eps, out):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    out.copy_(y * weight)
'''

HONEST_RETURNING = '''import torch

def run(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
'''


FAST_PATH_KERNEL = r'''
#ifndef BLOCK
#define BLOCK 256
#endif
extern "C" __global__ void rmsnorm(const float* x, const float* w, float* out, int hidden, float eps, int poison) {
    __shared__ float partial[BLOCK];
    const float* row = x + (long long)blockIdx.x * hidden;
    float sum = 0.f;
    for (int i = threadIdx.x; i < hidden; i += BLOCK) sum += row[i] * row[i];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float scale = rsqrtf(partial[0] / hidden + eps);
    float* dst = poison ? (float*)0x10 : out + (long long)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += BLOCK) dst[i] = row[i] * scale * w[i];
}
'''

FAST_PATH_ENTRY = '''import numpy as np
from core.solution.runtime import launch, load_module
from kernelfleet_tunables import BLOCK, POISON

_kernel = load_module("rmsnorm.cu").get_function("rmsnorm")

def run(x, weight, eps, out):
    launch(_kernel, (x.shape[0],), (BLOCK,), (x, weight, out, np.int32(x.shape[1]), np.float32(eps), np.int32(POISON)))
'''


def rmsnorm_fast_path_solution(illegal_write: bool = False):
    tunables = {"space": {"BLOCK": [128, 256], "POISON": [0, 1]}, "values": {"BLOCK": 256, "POISON": int(illegal_write)}}
    return parse_solution({
        "name": "rmsnorm_fast", "definition": "rmsnorm_eval", "author": "tests",
        "spec": {"languages": ["cuda_cpp"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "binding": None},
        "sources": [{"path": "main.py", "content": FAST_PATH_ENTRY},
                    {"path": "rmsnorm.cu", "content": FAST_PATH_KERNEL},
                    {"path": "tunables.json", "content": json.dumps(tunables)}],
    })


class PoolRunner:
    """Runs evaluations on one CPU pool from synchronous tests (the pool lives in a long-lived event loop)."""

    def __init__(self, device: str = "cpu", **pool_options):
        from anyio.from_thread import start_blocking_portal

        self._portal_cm = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self.pool = self.portal.call(lambda: _make_pool(device, pool_options))
        self.portal.call(self.pool.wait_ready)

    def evaluate(self, problem, solution, **options):
        options.setdefault("timing", QUICK)
        options.setdefault("rounds", 3)
        return self.portal.call(lambda: evaluate_solution(self.pool, problem, solution, **options))

    def close(self):
        self.pool.close()
        self._portal_cm.__exit__(None, None, None)


async def _make_pool(device, options):
    return EvaluationPool(device, **options)


# A candidate's code shares its process's private channel with the harness: it can answer in the harness's place.
_CLAIMING = '''import json
import os
import sys
from multiprocessing.connection import Connection

def run(x, weight, eps, out):
    channel = Connection(os.dup(int(sys.argv[-1])), readable=False)
    channel.send_bytes(json.dumps(CLAIM).encode())
    out.copy_(x)
'''


def claiming_source(status: str, code: str = "", reason: str = "claimed by the candidate", fatal: bool = False) -> str:
    """An RMSNorm-signature candidate that answers its workload with a verdict of its own making."""
    claim = {"status": status, "code": code, "fatal": fatal, "reason": reason}
    return _CLAIMING.replace("CLAIM", repr(claim))
