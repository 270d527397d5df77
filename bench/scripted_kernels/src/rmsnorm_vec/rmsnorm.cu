// RMSNorm, bf16 in/out, fp32 math, one block of BLOCK threads per row (token):
//   y = bf16( (x * rsqrt(mean(x^2) + eps)) * weight )      (the reference's order, one rounding)
// Three kernels, picked by the launcher:
//   rmsnorm_h4096_bf16   hidden == 4096 (Llama-3.1-8B): the row size is a compile-time constant, so the per-thread
//                        loop is fully unrolled with no bounds checks when 512 % BLOCK == 0.
//   rmsnorm_vec_bf16     hidden % 8 == 0 and hidden <= 8192: the same code with a runtime row size.
//   rmsnorm_scalar_bf16  anything else (rows not 16-byte aligned, or longer rows): scalar bf16, two passes.
// Vector paths: the row is read once as 16-byte vectors (8 bf16) into registers with streaming loads (__ldcs: read
// once, evict first), the weight vectors are fetched before the reduction so their latency hides behind it, the
// block reduction needs a single __syncthreads, and the output is written with streaming stores (__stcs).
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef BLOCK
#define BLOCK 128
#endif
#define NWARPS (BLOCK / 32)
// 16-byte vectors per thread that cover rows up to 8192 elements (generic vector kernel)
#define MAXV ((8192 / 8 + BLOCK - 1) / BLOCK)
// ... and exactly 4096 elements (the specialised kernel)
#define H4096_V ((4096 / 8 + BLOCK - 1) / BLOCK)
#define H4096_EXACT ((4096 / 8) % BLOCK == 0)

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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block, every thread gets the total; one barrier: each thread adds up the warps' partial sums.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float red[NWARPS];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < NWARPS; ++k) t += red[k];
    return t;
}

// One row with NV vectors per thread; EXACT: every thread owns NV valid vectors (no bounds checks).
template <int NV, bool EXACT>
__device__ __forceinline__ void rms_row(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                                        __nv_bfloat16* __restrict__ y, int hidden, float eps) {
    const size_t row = blockIdx.x;
    const int nvec = hidden >> 3;
    const uint4* xr = reinterpret_cast<const uint4*>(x + row * (size_t)hidden);
    const uint4* wr = reinterpret_cast<const uint4*>(weight);
    uint4* yr = reinterpret_cast<uint4*>(y + row * (size_t)hidden);

    uint4 xv[NV], wv[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {  // all loads of the row issued back to back
        const int c = threadIdx.x + i * BLOCK;
        if (EXACT || c < nvec) xv[i] = __ldcs(xr + c);
        else xv[i] = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < NV; ++i) {  // weight: shared by every row, keep it cached; in flight during the reduction
        const int c = threadIdx.x + i * BLOCK;
        if (EXACT || c < nvec) wv[i] = __ldg(wr + c);
    }
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        float f[8];
        unpack8(xv[i], f);  // zero vectors (out of range) add nothing
#pragma unroll
        for (int j = 0; j < 8; ++j) ss = fmaf(f[j], f[j], ss);
    }
    const float inv_rms = rsqrtf(block_sum(ss) / (float)hidden + eps);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
        const int c = threadIdx.x + i * BLOCK;
        if (EXACT || c < nvec) {
            float f[8], w[8], o[8];
            unpack8(xv[i], f);
            unpack8(wv[i], w);
#pragma unroll
            for (int j = 0; j < 8; ++j) o[j] = (f[j] * inv_rms) * w[j];
            __stcs(yr + c, pack8(o));
        }
    }
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_h4096_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                   __nv_bfloat16* __restrict__ y, float eps) {
    rms_row<H4096_V, H4096_EXACT>(x, weight, y, 4096, eps);
}

extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_vec_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                 __nv_bfloat16* __restrict__ y, int hidden, float eps) {
    rms_row<MAXV, false>(x, weight, y, hidden, eps);
}

// Any hidden size and alignment: element by element, the row read twice (the second read mostly from L1/L2).
extern "C" __global__ void __launch_bounds__(BLOCK)
rmsnorm_scalar_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                    __nv_bfloat16* __restrict__ y, int hidden, float eps) {
    const size_t row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * (size_t)hidden;
    __nv_bfloat16* yr = y + row * (size_t)hidden;
    float ss = 0.f;
    for (int c = threadIdx.x; c < hidden; c += BLOCK) {
        const float f = __bfloat162float(xr[c]);
        ss = fmaf(f, f, ss);
    }
    const float inv_rms = rsqrtf(block_sum(ss) / (float)hidden + eps);
    for (int c = threadIdx.x; c < hidden; c += BLOCK) {
        const float f = __bfloat162float(xr[c]);
        yr[c] = __float2bfloat16_rn((f * inv_rms) * __bfloat162float(weight[c]));
    }
}
