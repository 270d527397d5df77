// SwiGLU on the fused [gate | up] projection: out[t, i] = bf16(silu(gate[t, i]) * up[t, i]), fp32 math.
// Vector kernel (intermediate % 8 == 0, so every row's gate, up and output start 16-byte aligned):
//   grid.x covers the row's 16-byte vectors (BLOCK per block), grid.y is a grid-stride loop over rows: a thread
//   keeps its column and walks rows r = blockIdx.y, r + gridDim.y, ... two rows per iteration, so four 16-byte
//   loads are in flight per thread. No integer division; streaming loads/stores (__ldcs/__stcs: touched once).
// Scalar kernel: any intermediate size (rows not 16-byte aligned), the same grid-stride loop element by element.
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef BLOCK
#define BLOCK 256
#endif

__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float2 t = __bfloat1622float2(h[k]);
        f[2 * k] = t.x;
        f[2 * k + 1] = t.y;
    }
}

__device__ __forceinline__ uint4 pack8(const float* f) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    return u;
}

__device__ __forceinline__ float silu_mul(float g, float u) {
    return __fdividef(g, 1.0f + __expf(-g)) * u;  // silu(g) * u; g -> -inf: g / inf = -0
}

__device__ __forceinline__ uint4 swiglu8(const uint4& gv, const uint4& uv) {
    float g[8], u[8], o[8];
    unpack8(gv, g);
    unpack8(uv, u);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = silu_mul(g[j], u[j]);
    return pack8(o);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
swiglu_vec_bf16(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out, int rows, int inter)
{
    const int nvec = inter >> 3;
    const int c = blockIdx.x * BLOCK + threadIdx.x;
    if (c >= nvec) return;
    const size_t in_stride = 2 * (size_t)nvec;  // in 16-byte vectors
    const uint4* in = reinterpret_cast<const uint4*>(gate_up) + c;
    uint4* o = reinterpret_cast<uint4*>(out) + c;
    const int step = gridDim.y;
    int r = blockIdx.y;
    for (; r + step < rows; r += 2 * step) {  // two rows per iteration: 4 loads in flight
        const uint4* a = in + (size_t)r * in_stride;
        const uint4* b = in + (size_t)(r + step) * in_stride;
        const uint4 ga = __ldcs(a), ua = __ldcs(a + nvec);
        const uint4 gb = __ldcs(b), ub = __ldcs(b + nvec);
        __stcs(o + (size_t)r * nvec, swiglu8(ga, ua));
        __stcs(o + (size_t)(r + step) * nvec, swiglu8(gb, ub));
    }
    if (r < rows) {
        const uint4* a = in + (size_t)r * in_stride;
        __stcs(o + (size_t)r * nvec, swiglu8(__ldcs(a), __ldcs(a + nvec)));
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
swiglu_scalar_bf16(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out, int rows, int inter)
{
    const int c = blockIdx.x * BLOCK + threadIdx.x;
    if (c >= inter) return;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const __nv_bfloat16* row = gate_up + (size_t)r * 2 * (size_t)inter;
        const float g = __bfloat162float(row[c]);
        const float u = __bfloat162float(row[inter + c]);
        out[(size_t)r * inter + c] = __float2bfloat16_rn(silu_mul(g, u));
    }
}
