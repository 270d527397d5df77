// RMSNorm for many tokens, bf16 in/out, fp32 math:  y = bf16( (x * rsqrt(mean(x^2) + eps)) * weight )
// Kernels, picked by the launcher:
//   rmsnorm_rows_h4096_bf16  hidden == 4096: ROWS_PER_CTA rows per CTA of 256 threads, in two groups of 128 threads;
//                            each group takes ROWS_PER_CTA / 2 consecutive rows, and every thread issues all of its
//                            16-byte loads (4 per row) before using any, then fetches its 4 weight vectors once for
//                            all its rows. One barrier per CTA. A thread holds the same vectors of each row as
//                            rmsnorm_vec's thread at BLOCK=128 and sums them in the same order, so both kernels give
//                            bit-identical outputs.
//   rmsnorm_vec_bf16         other sizes with hidden % 8 == 0 and hidden <= 8192: rmsnorm_vec's generic kernel,
//                            one block of FALLBACK_BLOCK threads per row.
//   rmsnorm_scalar_bf16      anything else: scalar bf16, two passes.
// Plain loads and stores: on the H200, under an L2 flush before each call, streaming (evict-first) hints made this
// kernel about 7% slower at 16-32k tokens.
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef ROWS_PER_CTA
#define ROWS_PER_CTA 8
#endif
#define GROUPS 2
#define THREADS (128 * GROUPS)
#define ROWS_PER_GROUP (ROWS_PER_CTA / GROUPS)
static_assert(ROWS_PER_CTA % GROUPS == 0, "ROWS_PER_CTA must be a multiple of GROUPS");

#define FALLBACK_BLOCK 128
#define FALLBACK_WARPS (FALLBACK_BLOCK / 32)
#define MAXV ((8192 / 8 + FALLBACK_BLOCK - 1) / FALLBACK_BLOCK)  // vectors per thread for rows up to 8192

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

// s + the squares of the 8 bf16 of u, in unpack8's order. The bf16 -> fp32 widening is spelt with shifts rather
// than unpack8 so the compiler cannot reuse these floats in the output pass: it keeps the rows packed (4 registers
// per vector instead of 8), which keeps two CTAs per SM.
__device__ __forceinline__ float add_squares8(const uint4& u, float s) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const float lo = __uint_as_float(w[k] << 16), hi = __uint_as_float(w[k] & 0xffff0000u);
        s = fmaf(lo, lo, s);
        s = fmaf(hi, hi, s);
    }
    return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
rmsnorm_rows_h4096_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                        __nv_bfloat16* __restrict__ y, int rows, float eps) {
    constexpr int ROW_VECS = 4096 / 8;
    __shared__ float partial[ROWS_PER_CTA][4];  // per row: the sums of the group's 4 warps
    const int group = threadIdx.x >> 7, t = threadIdx.x & 127, lane = t & 31, warp = t >> 5;
    const int first = (blockIdx.x * GROUPS + group) * ROWS_PER_GROUP;
    const uint4* xr = reinterpret_cast<const uint4*>(x) + (size_t)first * ROW_VECS + t;
    uint4* yr = reinterpret_cast<uint4*>(y) + (size_t)first * ROW_VECS + t;

    uint4 xv[ROWS_PER_GROUP][4];
#pragma unroll
    for (int r = 0; r < ROWS_PER_GROUP; ++r)
#pragma unroll
        for (int m = 0; m < 4; ++m)
            xv[r][m] = first + r < rows ? xr[r * ROW_VECS + m * 128] : make_uint4(0u, 0u, 0u, 0u);
    uint4 wv[4];  // in flight during the reduction
    const uint4* wr = reinterpret_cast<const uint4*>(weight) + t;
#pragma unroll
    for (int m = 0; m < 4; ++m) wv[m] = __ldg(wr + m * 128);

#pragma unroll
    for (int r = 0; r < ROWS_PER_GROUP; ++r) {
        float s = 0.f;
#pragma unroll
        for (int m = 0; m < 4; ++m) s = add_squares8(xv[r][m], s);
        s = warp_sum(s);
        if (lane == 0) partial[group * ROWS_PER_GROUP + r][warp] = s;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ROWS_PER_GROUP; ++r) {
        if (first + r >= rows) break;
        const float* p = partial[group * ROWS_PER_GROUP + r];
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < 4; ++k) ss += p[k];
        const float inv_rms = rsqrtf(ss / 4096.f + eps);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            float f[8], w[8], o[8];
            unpack8(xv[r][m], f);
            unpack8(wv[m], w);
#pragma unroll
            for (int j = 0; j < 8; ++j) o[j] = (f[j] * inv_rms) * w[j];
            yr[r * ROW_VECS + m * 128] = pack8(o);
        }
    }
}

// ---- fallbacks for other hidden sizes: rmsnorm_vec's generic kernels, one block per row

__device__ __forceinline__ float block_sum(float v) {
    __shared__ float red[FALLBACK_WARPS];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < FALLBACK_WARPS; ++k) t += red[k];
    return t;
}

extern "C" __global__ void __launch_bounds__(FALLBACK_BLOCK)
rmsnorm_vec_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                 __nv_bfloat16* __restrict__ y, int hidden, float eps) {
    const size_t row = blockIdx.x;
    const int nvec = hidden >> 3;
    const uint4* xr = reinterpret_cast<const uint4*>(x + row * (size_t)hidden);
    const uint4* wr = reinterpret_cast<const uint4*>(weight);
    uint4* yr = reinterpret_cast<uint4*>(y + row * (size_t)hidden);
    uint4 xv[MAXV], wv[MAXV];
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
        const int c = threadIdx.x + i * FALLBACK_BLOCK;
        xv[i] = c < nvec ? xr[c] : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
        const int c = threadIdx.x + i * FALLBACK_BLOCK;
        if (c < nvec) wv[i] = __ldg(wr + c);
    }
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < MAXV; ++i) ss = add_squares8(xv[i], ss);  // zero vectors add nothing
    const float inv_rms = rsqrtf(block_sum(ss) / (float)hidden + eps);
#pragma unroll
    for (int i = 0; i < MAXV; ++i) {
        const int c = threadIdx.x + i * FALLBACK_BLOCK;
        if (c < nvec) {
            float f[8], w[8], o[8];
            unpack8(xv[i], f);
            unpack8(wv[i], w);
#pragma unroll
            for (int j = 0; j < 8; ++j) o[j] = (f[j] * inv_rms) * w[j];
            yr[c] = pack8(o);
        }
    }
}

// Any hidden size and alignment: element by element, the row read twice (the second read mostly from L1/L2).
extern "C" __global__ void __launch_bounds__(FALLBACK_BLOCK)
rmsnorm_scalar_bf16(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ weight,
                    __nv_bfloat16* __restrict__ y, int hidden, float eps) {
    const size_t row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * (size_t)hidden;
    __nv_bfloat16* yr = y + row * (size_t)hidden;
    float ss = 0.f;
    for (int c = threadIdx.x; c < hidden; c += FALLBACK_BLOCK) {
        const float f = __bfloat162float(xr[c]);
        ss = fmaf(f, f, ss);
    }
    const float inv_rms = rsqrtf(block_sum(ss) / (float)hidden + eps);
    for (int c = threadIdx.x; c < hidden; c += FALLBACK_BLOCK) {
        const float f = __bfloat162float(xr[c]);
        yr[c] = __float2bfloat16_rn((f * inv_rms) * __bfloat162float(weight[c]));
    }
}
