"""The CUDA C text of the CUDA backend's kernels (`_source.source` puts a variant's macros in
front): the decoders, which compile as plain C++ too (the tests run them on the host), the
helpers both kernels share, the GEMV and the dequant kernel, and the probe's kernel.

Each kernel's body is a device function (`gemv_lane` + `gemv_store`, `dequant_thread`) that its
`__global__` wrapper calls; on the host, where only the device functions compile, the tests
drive them lane by lane.
"""

DECODERS = r"""
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#ifdef __CUDACC__
#define SF8_DEV static __device__ __forceinline__
SF8_DEV float bits_f32(u32 b) { return __uint_as_float(b); }
SF8_DEV u32 f32_bits(float f) { return __float_as_uint(f); }
#else  /* the host: the same text as C++, for the tests (what CUDA provides, in plain C++) */
#include <math.h>
#include <stddef.h>
#include <string.h>
#define SF8_DEV static inline
#define __restrict__
SF8_DEV float bits_f32(u32 b) { float f; memcpy(&f, &b, 4); return f; }
SF8_DEV u32 f32_bits(float f) { u32 b; memcpy(&b, &f, 4); return b; }
struct uint4 { u32 x, y, z, w; };
struct float4 { float x, y, z, w; };
SF8_DEV float4 make_float4(float a, float b, float c, float d) {
  float4 f = {a, b, c, d};
  return f;
}
template <class T> SF8_DEV T __ldg(const T* p) { return *p; }
SF8_DEV int min(int a, int b) { return a < b ? a : b; }
#endif

#define SF8_2P112 0x77800000u  /* 2^112 */
#define SF8_2P120 0x7B800000u  /* 2^120 */
#define SF8_2P126 0x7E800000u  /* 2^126 */
#define SF8_QNAN 0x7FC00000u
#define SF8_INF 0x7F800000u

/* E5M2 (bias 15): the code's low 7 bits at float32 bits 21..27 are the value times 2^-112
   (a denormal for subnormal codes), one multiply restores it; the all-ones exponent is inf
   (mantissa 0) or NaN, fixed only where the weight has such codes. */
template <bool SPECIALS> SF8_DEV float dec_e5m2(u32 c) {
  u32 sign = (c & 0x80u) << 24, mag = c & 0x7Fu;
  float v = bits_f32((mag << 21) | sign) * bits_f32(SF8_2P112);
  if (SPECIALS && mag >= 0x7Cu) v = bits_f32(((mag & 3u) ? SF8_QNAN : SF8_INF) | sign);
  return v;
}

/* E4M3fn (bias 7): bits 20..26, times 2^120; 0x7F / 0xFF are NaN. */
template <bool SPECIALS> SF8_DEV float dec_e4m3(u32 c) {
  u32 sign = (c & 0x80u) << 24, mag = c & 0x7Fu;
  float v = bits_f32((mag << 20) | sign) * bits_f32(SF8_2P120);
  if (SPECIALS && mag == 0x7Fu) v = bits_f32(SF8_QNAN | sign);
  return v;
}

/* E2M1 by selection: the normalised float32 built directly (exact with or without denormals).
   Magnitude code 1 is 0.5, 0 is 0, 2..7 re-bias the exponent: (mag << 22) + 0x3F000000. */
SF8_DEV float dec_e2m1_select(u32 c) {
  u32 mag = c & 7u;
  u32 b = (mag << 22) + 0x3F000000u;
  b = mag == 1u ? 0x3F000000u : b;
  b = mag == 0u ? 0u : b;
  return bits_f32(b | ((c & 8u) << 28));
}

/* E2M1 by injection: e1 e0 m0 at float32 bits 22..24 are the value times 2^-126 (a denormal
   for +-0.5), one multiply restores it. */
SF8_DEV float dec_e2m1_inject(u32 c) {
  return bits_f32(((c & 7u) << 22) | ((c & 8u) << 28)) * bits_f32(SF8_2P126);
}

/* E8M0: 2^(c - 127); 0 is the denormal 2^-127, 0xFF is NaN. */
SF8_DEV float dec_e8m0(u32 c) {
  u32 b = c == 0u ? 0x00400000u : (c << 23);
  return bits_f32(c == 0xFFu ? SF8_QNAN : b);
}

/* fp16 (x) to float32 with integer operations: no fp16 unit involved. */
SF8_DEV float f16_f32(u32 h) {
  u32 sign = (h & 0x8000u) << 16, mag = h & 0x7FFFu;
  float v = bits_f32((mag << 13) | sign) * bits_f32(SF8_2P112);
  if (mag >= 0x7C00u) v = bits_f32(SF8_INF | (mag << 13) | sign);
  return v;
}

SF8_DEV float bf16_f32(u32 h) { return bits_f32(h << 16); }

/* float32 to bf16, round to nearest even (as torch); NaN stays NaN. */
SF8_DEV u32 f32_bf16(float f) {
  u32 b = f32_bits(f);
  if ((b & 0x7FFFFFFFu) > SF8_INF) return (b >> 16) | 0x40u;
  return (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
}
"""

COMMON = r"""
#if SF8_INJECT
#define DEC_E2M1 dec_e2m1_inject
#else
#define DEC_E2M1 dec_e2m1_select
#endif

/* Code j (0..15) of a 16-byte vector as float32, unscaled: FP8 byte j or FP4 nibble j of the
   vector's first or second half (`half` selects words 0-1 or 2-3 for FP4). */
SF8_DEV void decode16(const uint4 v, int half, float* w) {
#if SF8_FMT <= 1
  const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    u32 c = (words[j >> 2] >> ((j & 3) * 8)) & 0xFFu;
#if SF8_FMT == 0
    w[j] = dec_e5m2<SF8_SPECIALS>(c);
#else
    w[j] = dec_e4m3<SF8_SPECIALS>(c);
#endif
  }
#else
  const u32 a = half ? v.z : v.x, b = half ? v.w : v.y;
#pragma unroll
  for (int j = 0; j < 16; ++j) w[j] = DEC_E2M1(((j < 8 ? a : b) >> ((j & 7) * 4)) & 0xFu);
#endif
}

SF8_DEV float block_scale(const u8* __restrict__ scales, size_t i, float g) {
#if SF8_FMT == 2
  return dec_e4m3<SF8_SPECIALS>(__ldg(scales + i)) * g;
#elif SF8_FMT == 3
  return dec_e8m0(__ldg(scales + i));
#else
  return 1.0f;
#endif
}

"""

GEMV = r"""
/* 16 consecutive x values from element offset `k` of a row, as float32 (16-byte loads). */
SF8_DEV void load_x16(const void* __restrict__ xrow, int k, float* out) {
#if SF8_X == 0
  const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(xrow) + k);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float4 f = __ldg(p + q);
    out[4 * q] = f.x; out[4 * q + 1] = f.y; out[4 * q + 2] = f.z; out[4 * q + 3] = f.w;
  }
#else
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const u16*>(xrow) + k);
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    uint4 u = __ldg(p + q);
    const u32 h[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#if SF8_X == 1
      out[8 * q + 2 * i] = f16_f32(h[i] & 0xFFFFu);
      out[8 * q + 2 * i + 1] = f16_f32(h[i] >> 16);
#else
      out[8 * q + 2 * i] = bits_f32(h[i] << 16);
      out[8 * q + 2 * i + 1] = bits_f32(h[i] & 0xFFFF0000u);
#endif
    }
  }
#endif
}

#if SF8_X == 0
typedef float x_t;
#else
typedef u16 x_t;
#endif

SF8_DEV float load_bias(const void* bias, int row) {
#if SF8_BIAS == 0
  return __ldg(static_cast<const float*>(bias) + row);
#elif SF8_BIAS == 1
  return f16_f32(__ldg(static_cast<const u16*>(bias) + row));
#elif SF8_BIAS == 2
  return bf16_f32(__ldg(static_cast<const u16*>(bias) + row));
#else
  return 0.0f;
#endif
}

SF8_DEV void store_y(x_t* y, size_t i, float v) {
#if SF8_X == 0
  y[i] = v;
#elif SF8_X == 1 && defined(__CUDACC__)
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  y[i] = h;
#elif SF8_X == 1  /* the host (tests): the compiler's own round to nearest even */
  _Float16 h = (_Float16)v;
  memcpy(&y[i], &h, 2);
#else
  y[i] = (u16)f32_bf16(v);
#endif
}

/* One lane's share of a warp's rows row0..row0 + SF8_ROWS - 1: the sums over its vectors
   v = lane, lane + 32, ... of x[m] . w[row] for every row and m, float32, unreduced. */
SF8_DEV void gemv_lane(const uint4* __restrict__ words, const u8* __restrict__ scales,
                       const float* __restrict__ gscale, const x_t* __restrict__ x, int n,
                       int vecs, int ldx, int row0, int lane, float acc[SF8_ROWS][SF8_M]) {
  int rows[SF8_ROWS];
#pragma unroll
  for (int r = 0; r < SF8_ROWS; ++r) rows[r] = min(row0 + r, n - 1);  /* past n: read, unused */
#pragma unroll
  for (int r = 0; r < SF8_ROWS; ++r)
#pragma unroll
    for (int m = 0; m < SF8_M; ++m) acc[r][m] = 0.0f;
#if SF8_FMT == 2
  const float g = __ldg(gscale);
#else
  const float g = 1.0f;
#endif
  for (int v = lane; v < vecs; v += 32) {
    uint4 wv[SF8_ROWS];
#pragma unroll
    for (int r = 0; r < SF8_ROWS; ++r) wv[r] = __ldg(words + (size_t)rows[r] * vecs + v);
#if SF8_FMT == 3
    float vec_scale[SF8_ROWS];  /* one E8M0 block a vector */
#pragma unroll
    for (int r = 0; r < SF8_ROWS; ++r)
      vec_scale[r] = block_scale(scales, (size_t)rows[r] * vecs + v, 1.0f);
#endif
#pragma unroll 1  /* unrolled, both halves' x loads were hoisted: FP4 spilled at M >= 8 */
    for (int h = 0; h < SF8_HALVES; ++h) {
      float w[SF8_ROWS][16];
#pragma unroll
      for (int r = 0; r < SF8_ROWS; ++r) decode16(wv[r], h, w[r]);
#if SF8_FMT == 2
      float s[SF8_ROWS];  /* one E4M3 block a half vector, times the tensor's scale */
#pragma unroll
      for (int r = 0; r < SF8_ROWS; ++r)
        s[r] = block_scale(scales, (size_t)rows[r] * vecs * 2 + v * 2 + h, g);
#elif SF8_FMT == 3
      const float* s = vec_scale;
#endif
#if SF8_SCALE_W
#pragma unroll
      for (int r = 0; r < SF8_ROWS; ++r)
#pragma unroll
        for (int j = 0; j < 16; ++j) w[r][j] *= s[r];
#endif
#if SF8_PARTIAL
      float part[SF8_ROWS][SF8_M];
#pragma unroll
      for (int r = 0; r < SF8_ROWS; ++r)
#pragma unroll
        for (int m = 0; m < SF8_M; ++m) part[r][m] = 0.0f;
#define SF8_SUM part
#else
#define SF8_SUM acc
#endif
#pragma unroll
      for (int m = 0; m < SF8_M; ++m) {
        float xv[16];
        load_x16(x + (size_t)m * ldx, (v * SF8_HALVES + h) * 16, xv);
#pragma unroll
        for (int r = 0; r < SF8_ROWS; ++r)
#pragma unroll
          for (int j = 0; j < 16; ++j) SF8_SUM[r][m] = fmaf(w[r][j], xv[j], SF8_SUM[r][m]);
      }
#undef SF8_SUM
#if SF8_PARTIAL
#pragma unroll
      for (int r = 0; r < SF8_ROWS; ++r)
#pragma unroll
        for (int m = 0; m < SF8_M; ++m) acc[r][m] = fmaf(part[r][m], s[r], acc[r][m]);
#endif
    }
  }
}

/* After the warp's reduction (every lane holds every sum): lane (r * M + m) % 32 writes
   y[m, row0 + r], row-scaled and biased, in x's dtype. */
SF8_DEV void gemv_store(const float* __restrict__ row_scale, const void* __restrict__ bias,
                        x_t* __restrict__ y, int n, int row0, int lane,
                        float acc[SF8_ROWS][SF8_M]) {
#pragma unroll
  for (int r = 0; r < SF8_ROWS; ++r) {
    const int row = row0 + r;
    if (row >= n) break;
#if SF8_FMT <= 1 && SF8_ROW_SCALE
    const float s = __ldg(row_scale + row);
#else
    const float s = 1.0f;
#endif
#pragma unroll
    for (int m = 0; m < SF8_M; ++m)
      if (lane == ((r * SF8_M + m) & 31))
        store_y(y, (size_t)m * n + row, acc[r][m] * s + load_bias(bias, row));
  }
}

#ifdef __CUDACC__
/* y[m, row] = sum_k x[m, k] w[row, k] (+ bias[row]) for m < SF8_M; x is [SF8_M, ldx], padded
   to the weight's Kp with zeros; y is [SF8_M, n]. words: [n, vecs] 16-byte vectors. */
extern "C" __global__ void __launch_bounds__(SF8_WARPS * 32, SF8_MIN_BLOCKS)
SF8_NAME(const uint4* __restrict__ words, const float* __restrict__ row_scale,
         const u8* __restrict__ scales, const float* __restrict__ gscale,
         const x_t* __restrict__ x, const void* __restrict__ bias, x_t* __restrict__ y,
         int n, int vecs, int ldx) {
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * SF8_WARPS + (threadIdx.x >> 5)) * SF8_ROWS;
  if (row0 >= n) return;  /* the whole warp: its shuffles below see all 32 lanes */
  float acc[SF8_ROWS][SF8_M];
  gemv_lane(words, scales, gscale, x, n, vecs, ldx, row0, lane, acc);
#pragma unroll
  for (int r = 0; r < SF8_ROWS; ++r)
#pragma unroll
    for (int m = 0; m < SF8_M; ++m)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r][m] += __shfl_xor_sync(0xFFFFFFFFu, acc[r][m], o);
  gemv_store(row_scale, bias, y, n, row0, lane, acc);
}
#endif
"""

DEQUANT = r"""
/* Thread t's 16-byte vector of rows start..stop, decoded and scaled into out (float32
   [stop - start, vecs * codes per vector]). */
SF8_DEV void dequant_thread(const uint4* __restrict__ words, const float* __restrict__ row_scale,
                            const u8* __restrict__ scales, const float* __restrict__ gscale,
                            float* __restrict__ out, int start, int stop, int vecs, size_t t) {
  const int row = start + (int)(t / vecs), v = (int)(t % vecs);
  if (row >= stop) return;
  const uint4 wv = __ldg(words + (size_t)row * vecs + v);
  float4* dst = reinterpret_cast<float4*>(out + ((size_t)(row - start) * vecs + v) * 16 *
                                          SF8_HALVES);
#pragma unroll
  for (int h = 0; h < SF8_HALVES; ++h) {
    float w[16];
    decode16(wv, h, w);
#if SF8_FMT <= 1 && SF8_ROW_SCALE
    const float s = __ldg(row_scale + row);
#elif SF8_FMT == 2
    const float s = block_scale(scales, (size_t)row * vecs * 2 + v * 2 + h, __ldg(gscale));
#elif SF8_FMT == 3
    const float s = block_scale(scales, (size_t)row * vecs + v, 1.0f);
#endif
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#if SF8_FMT <= 1 && !SF8_ROW_SCALE
      dst[h * 4 + q] = make_float4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
#else
      dst[h * 4 + q] = make_float4(w[4 * q] * s, w[4 * q + 1] * s, w[4 * q + 2] * s,
                                   w[4 * q + 3] * s);
#endif
    }
  }
}

#ifdef __CUDACC__
extern "C" __global__ void __launch_bounds__(256)
SF8_NAME(const uint4* __restrict__ words, const float* __restrict__ row_scale,
         const u8* __restrict__ scales, const float* __restrict__ gscale,
         float* __restrict__ out, int start, int stop, int vecs) {
  dequant_thread(words, row_scale, scales, gscale, out, start, stop, vecs,
                 (size_t)blockIdx.x * blockDim.x + threadIdx.x);
}
#endif
"""


PROBE_NAME = "softfp8_probe"

PROBE_SOURCE = DECODERS + r"""
/* The probe's kernel, compiled with the backend's options: out = inject-decode of E2M1 codes
   1 and 9 (+-0.5 through the denormal +-2^-127) and E4M3 code 1 (2^-9 through a denormal). */
extern "C" __global__ void softfp8_probe(const u32* codes, float* out) {
  out[0] = dec_e2m1_inject(codes[0]);
  out[1] = dec_e2m1_inject(codes[1]);
  out[2] = dec_e4m3<true>(codes[2]);
}
"""
"""`PROBE_NAME`'s text: run by `softfp8.capability`'s sub-probe on each CUDA GPU."""
