/* The AVX-512 FP4 GEMV step's instruction mix, measured in C intrinsics on this CPU.

     gcc -O2 -march=native benchmarks/cpu_fp4_step.c -o /tmp/cpu_fp4_step && /tmp/cpu_fp4_step

   Part 1: cycles per iteration of independent zmm operations, alone and mixed (8 of each kind an
   iteration, 8 independent chains), to see which share an execution port: _numba_lut's one-row
   step is 7 shifts, 9 permutes and 10 multiply-adds per 128 codes (loop A below: 12).
   Part 2: one-row NVFP4-shaped GEMV loops over 256 rows x 4096 codes (512 KB of weights, in
   L2): A the vpermps table with float32
   x (as _numba_lut; with its shifts by multiplies; with 16-bit shifts), B a vpermw bf16 table
   with vdpbf16ps on 1, 2 or 3 bf16 terms of x (1: bf16 activations, as _numba_dpbf16; 2: fp16;
   3: float32), Gcodes/s. The block scales are all 1 and
   the weights random: a timing loop, not a kernel (tests/test_numba_*.py check the kernels).
   Cycles come from a dependent chain of integer adds (1 cycle each). */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static double ghz(void) {
  long x = 0; double s = now();
  for (long i = 0; i < 500000000L; i++) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  return 2e9 / (now() - s) / 1e9;
}

/* ---- part 1: port sharing ---- */
#define N1 20000000L
#define PERMD(a) a = _mm512_permutexvar_epi32(a, t)
#define SRL(a) a = _mm512_srli_epi32(a, 4)
#define SRLW(a) a = _mm512_srli_epi16(a, 4)
#define MULHU(a) a = _mm512_mulhi_epu16(a, t)
#define PERMW(a) a = _mm512_permutexvar_epi16(a, t)
#define FMA(a) a = _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(t), _mm512_castsi512_ps(t)))
#define DPBF(a) a = _mm512_castps_si512(_mm512_dpbf16_ps(_mm512_castsi512_ps(a), (__m512bh)t, (__m512bh)t))
#define NOP(a)
#define R8(OP, p) OP(p##0); OP(p##1); OP(p##2); OP(p##3); OP(p##4); OP(p##5); OP(p##6); OP(p##7);
#define BAR(p) __asm__ volatile("" ::"v"(p##0), "v"(p##1), "v"(p##2), "v"(p##3), "v"(p##4), "v"(p##5), "v"(p##6), "v"(p##7));
/* the 8 registers made opaque before the loop (the asm statement "changes" them): with equal
   known values gcc merged the 8 chains of an op into one (until 2026-12-03: part 1's vpsrlw,
   vfmadd, vpermw, vdpbf16ps and vpmulhuw rows timed one dependent instruction an iteration) */
#define DECL(p) __m512i p##0 = _mm512_set1_epi32(1), p##1 = p##0, p##2 = p##0, p##3 = p##0, p##4 = p##0, p##5 = p##0, p##6 = p##0, p##7 = p##0; \
  __asm__ volatile("" : "+v"(p##0), "+v"(p##1), "+v"(p##2), "+v"(p##3), "+v"(p##4), "+v"(p##5), "+v"(p##6), "+v"(p##7));
#define MIX(NAME, OA, OB, OC) { DECL(a) DECL(b) DECL(c) __m512i t = _mm512_set1_epi32(5); double s = now(); \
  for (long i = 0; i < N1; i++) { __asm__ volatile("" : "+v"(t)); R8(OA, a) R8(OB, b) R8(OC, c) BAR(a) BAR(b) BAR(c) } \
  printf("  %-26s %5.2f cycles an iteration\n", NAME, (now() - s) / N1 * hz); }

/* ---- part 2: the GEMV step ---- */
#define ROWS 256
#define K 4096
#define WPR (K / 8)
#define STEPS (WPR / 16)
static const float E2M1[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6};
static int32_t *W; static float *X, *SC; static uint16_t *XB[3], BT[32]; static float Y[ROWS];

static __m512 scale16(const float *sc, int s) {  /* 8 block scales spread over 16 lanes */
  return _mm512_permutexvar_ps(_mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 1),
                               _mm512_castps256_ps512(_mm256_loadu_ps(sc + 8 * s)));
}

/* A: the vpermps table, float32 x, one row a step of 16 words (128 codes); the index of code j
   is I<j> (code 0: the word itself), with PRE run first in the step */
#define VPERMPS_KERNEL(NAME, PRE, I1, I2, I3, I4, I5, I6, I7) \
__attribute__((noinline)) static void NAME(void) { \
  __m512 tab = _mm512_loadu_ps(E2M1); \
  for (int r = 0; r < ROWS; r++) { \
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0; \
    const int32_t *w = W + r * WPR; const float *sc = SC + r * (WPR / 2); \
    for (int s = 0; s < STEPS; s++) { \
      __m512i v = _mm512_loadu_si512(w + 16 * s); const float *x = X + 128 * s; \
      PRE \
      __m512 p0 = _mm512_mul_ps(_mm512_permutexvar_ps(v, tab), _mm512_loadu_ps(x)); \
      __m512 p1 = _mm512_mul_ps(_mm512_permutexvar_ps(I1, tab), _mm512_loadu_ps(x + 16)); \
      __m512 p2 = _mm512_mul_ps(_mm512_permutexvar_ps(I2, tab), _mm512_loadu_ps(x + 32)); \
      __m512 p3 = _mm512_mul_ps(_mm512_permutexvar_ps(I3, tab), _mm512_loadu_ps(x + 48)); \
      p0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(I4, tab), _mm512_loadu_ps(x + 64), p0); \
      p1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(I5, tab), _mm512_loadu_ps(x + 80), p1); \
      p2 = _mm512_fmadd_ps(_mm512_permutexvar_ps(I6, tab), _mm512_loadu_ps(x + 96), p2); \
      p3 = _mm512_fmadd_ps(_mm512_permutexvar_ps(I7, tab), _mm512_loadu_ps(x + 112), p3); \
      __m512 sv = scale16(sc, s); \
      a0 = _mm512_fmadd_ps(p0, sv, a0); a1 = _mm512_fmadd_ps(p1, sv, a1); \
      a2 = _mm512_fmadd_ps(p2, sv, a2); a3 = _mm512_fmadd_ps(p3, sv, a3); \
    } \
    Y[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
  } \
}
#define D32(a, n) _mm512_srli_epi32(a, n)
#define D16(a, n) _mm512_srli_epi16(a, n)

/* as _numba_lut: seven 32-bit shifts a step */
VPERMPS_KERNEL(kernel_vpermps, , D32(v, 4), D32(v, 8), D32(v, 12), D32(v, 16), D32(v, 20),
               D32(v, 24), D32(v, 28))

/* with 16-bit shifts (vpsrlw): the permute reads the low 4 bits of each 32-bit lane, so codes
   1..3 come down by shifting the lane's 16-bit halves, and codes 5..7 the same after one 32-bit
   shift by 16 (code 4): 1 vpsrld and 6 vpsrlw a step in place of 7 vpsrld */
VPERMPS_KERNEL(kernel_vpermps_w16, __m512i h = D32(v, 16);, D16(v, 4), D16(v, 8), D16(v, 12), h,
               D16(h, 4), D16(h, 8), D16(h, 12))

/* with the index shifts done by 16-bit multiplies (vpmulhuw: w >> 4j within each 16-bit half,
   vpmaddwd by (0, 1): the high half brought down), which the nineteenth session took to run
   off vpermd's port (part 1 then timed one vpmulhuw chain; it contends: BENCHMARKS.md, CPU,
   twenty-third session) */
#define MUL_PRE __m512i hi = _mm512_set1_epi32(0x00010000); \
  __m512i m1 = _mm512_mulhi_epu16(v, _mm512_set1_epi16(1 << 12)); \
  __m512i m2 = _mm512_mulhi_epu16(v, _mm512_set1_epi16(1 << 8)); \
  __m512i m3 = _mm512_mulhi_epu16(v, _mm512_set1_epi16(1 << 4));
VPERMPS_KERNEL(kernel_vpermps_mul, MUL_PRE, m1, m2, m3, _mm512_madd_epi16(v, hi),
               _mm512_madd_epi16(m1, hi), _mm512_madd_epi16(m2, hi), _mm512_madd_epi16(m3, hi))

#define DP(acc, v, xp) acc = _mm512_dpbf16_ps(acc, (__m512bh)(v), (__m512bh)_mm512_loadu_si512(xp))
#define DP4(acc, x) DP(acc, v0, x); DP(acc, v1, x + 32); DP(acc, v2, x + 64); DP(acc, v3, x + 96)
__attribute__((noinline)) static void kernel_dpbf16(int terms) {  /* a chain a term */
  __m512i tab = _mm512_loadu_si512(BT);
  for (int r = 0; r < ROWS; r++) {
    __m512 acc = _mm512_setzero_ps(), acc2 = acc;
    const int32_t *w = W + r * WPR; const float *sc = SC + r * (WPR / 2);
    for (int s = 0; s < STEPS; s++) {
      __m512i v = _mm512_loadu_si512(w + 16 * s);
      __m512i v0 = _mm512_permutexvar_epi16(v, tab);
      __m512i v1 = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), tab);
      __m512i v2 = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 8), tab);
      __m512i v3 = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 12), tab);
      __m512 hi = _mm512_setzero_ps(), mid = hi, lo = hi, sv = scale16(sc, s);
      DP4(hi, XB[0] + 128 * s);
      if (terms > 1) { DP4(mid, XB[1] + 128 * s); }
      if (terms > 2) { DP4(lo, XB[2] + 128 * s); }
      if (terms == 1) acc = _mm512_fmadd_ps(hi, sv, acc);
      else if (terms == 2) { acc = _mm512_fmadd_ps(hi, sv, acc); acc2 = _mm512_fmadd_ps(mid, sv, acc2); }
      else { acc = _mm512_fmadd_ps(_mm512_add_ps(hi, mid), sv, acc); acc2 = _mm512_fmadd_ps(lo, sv, acc2); }
    }
    Y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc, acc2));
  }
}

static double gcodes(void (*f)(void), int terms) {
  int reps = 1000; double best = 1e9;
  for (int it = 0; it < 3; it++) {
    double s = now();
    for (int i = 0; i < reps; i++) { if (f) f(); else kernel_dpbf16(terms); }
    double e = now() - s; if (e < best) best = e;
  }
  return (double)ROWS * K * reps / best / 1e9;
}

int main(void) {
  double hz = ghz() * 1e9;
  printf("clock ~%.2f GHz (integer add chain)\npart 1: 8 independent zmm ops of each kind an iteration\n", hz / 1e9);
  MIX("vpermd", PERMD, NOP, NOP) MIX("vpsrld", SRL, NOP, NOP) MIX("vpsrlw", SRLW, NOP, NOP)
  MIX("vfmadd", FMA, NOP, NOP) MIX("vpermw", PERMW, NOP, NOP) MIX("vdpbf16ps", DPBF, NOP, NOP)
  MIX("vpmulhuw", MULHU, NOP, NOP) MIX("vpermd + vpsrld", PERMD, SRL, NOP)
  MIX("vpermd + vfmadd x2", PERMD, FMA, FMA) MIX("vpermd + vpmulhuw", PERMD, MULHU, NOP)
  MIX("vpermd + vpsrld + vfmadd", PERMD, SRL, FMA) MIX("vpermw + vpsrlw", PERMW, SRLW, NOP)
  MIX("vpermw + vdpbf16ps", PERMW, DPBF, NOP)
  W = aligned_alloc(64, ROWS * WPR * 4); X = aligned_alloc(64, K * 4); SC = aligned_alloc(64, ROWS * WPR / 2 * 4);
  for (int t = 0; t < 3; t++) { XB[t] = aligned_alloc(64, K * 2); memset(XB[t], 0, K * 2); }
  srand(1);
  for (int i = 0; i < ROWS * WPR; i++) W[i] = (int32_t)(rand() * 2654435761u);
  for (int i = 0; i < K; i++) X[i] = rand() / (float)RAND_MAX - 0.5f;
  for (int i = 0; i < ROWS * WPR / 2; i++) SC[i] = 1.0f;
  for (int i = 0; i < 32; i++) { float f = E2M1[i & 15]; uint32_t u; memcpy(&u, &f, 4); BT[i] = u >> 16; }
  printf("part 2: one-row GEMV loops, %d x %d codes in cache, single thread\n", ROWS, K);
  for (int rep = 0; rep < 2; rep++) {
    printf("  vpermps, float32 x:        %5.1f Gcodes/s\n", gcodes(kernel_vpermps, 0));
    float a = Y[7];
    printf("  the same, multiply shifts: %5.1f Gcodes/s%s\n", gcodes(kernel_vpermps_mul, 0),
           Y[7] == a ? "" : "  (WRONG SUM)");
    printf("  the same, 16-bit shifts:   %5.1f Gcodes/s%s\n", gcodes(kernel_vpermps_w16, 0),
           Y[7] == a ? "" : "  (WRONG SUM)");
    for (int t = 1; t <= 3; t++)
      printf("  vpermw + vdpbf16ps, %d term%s %5.1f Gcodes/s\n", t, t > 1 ? "s:" : ": ", gcodes(NULL, t));
  }
  return Y[0] == 12345.f;
}
