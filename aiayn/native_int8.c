/* An int8 projection, y = x W^T + b, for CPUs with AVX2 (VNNI's dot products where the CPU has them): each row of x
   quantized over its own range, W quantized per output channel and packed once, the products summed in int32 and
   scaled back in the same pass. Compiled beside native.c by aiayn/native.py.

   Quantization. Row r of x becomes q = round(x * 63 / max|x_r|), 7 bits and a sign, stored as u = q + 64 in [1, 127];
   its scale s_r = max|x_r| / 63. W's row n becomes w = round(W_n * 127 / max|W_n|) in [-127, 127], scale t_n. AVX2's
   byte product (vpmaddubsw) multiplies unsigned by signed bytes and adds neighbouring pairs into 16 bits, saturating:
   127 * 127 * 2 = 32,258 fits, so every sum is exact (8-bit activations, 255 * 127 * 2, would not be). Then
   sum_k q_k w_k = sum_k u_k w_k - 64 sum_k w_k, and y_rn = (sum_k u_k w_k - 64 colsum_n) s_r t_n + b_n. With VNNI
   (AVX512-VNNI or AVX-VNNI), vpdpbusd sums each 4 byte products into int32 in one instruction: the same exact sums,
   so the same outputs on every CPU.

   A row's products depend on that row alone, whatever else is in the batch (torch's dynamic int8 quantizes a whole
   batch over one range).

   Layout. W packed as (N/8, K/4, 8, 4) bytes: for each block of 8 output channels, for each 4 consecutive inputs, the
   8 channels' 4 bytes, 32 bytes a vector register. K is padded to a multiple of 4 (u = 64, w = 0: they add 0) and N
   to a multiple of 8 (w = 0; those outputs are not stored). A block of 4 rows by 16 outputs keeps 8 int32
   accumulators in registers: per 4 inputs, one broadcast of each row's 4 bytes and two loads of W. Rows are taken in
   panels of 256, quantized into a buffer that stays in cache while every block of outputs passes over it. */

#include <stdint.h>
#include <stdlib.h>

#ifdef __AVX2__
#include <immintrin.h>

/* 1: built with AVX2's byte products alone; 2: with VNNI's dot products (the same sums). */
int int8_kernel(void) {
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
    return 2;
#else
    return 1;
#endif
}

enum { ROWS = 4, VECTORS = 2, PANEL = 256 };  /* 4 rows x 16 outputs: 8 accumulators, 16 vector registers */

static void quantize_rows(const float *x, long rows, long k, long kp, uint8_t *u, float *scale) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * k;
        __m256 top8 = _mm256_setzero_ps();
        long c = 0;
        for (; c + 8 <= k; c += 8)
            top8 = _mm256_max_ps(top8, _mm256_and_ps(_mm256_loadu_ps(xr + c), magnitude));
        float lanes[8], top = 0.0f;
        _mm256_storeu_ps(lanes, top8);
        for (int i = 0; i < 8; i++)
            top = lanes[i] > top ? lanes[i] : top;
        for (; c < k; c++)
            top = __builtin_fabsf(xr[c]) > top ? __builtin_fabsf(xr[c]) : top;
        float inverse = top > 0.0f ? 63.0f / top : 0.0f;
        scale[r] = top / 63.0f;
        uint8_t *ur = u + r * kp;
        const __m256 by = _mm256_set1_ps(inverse);
        const __m256i zero = _mm256_set1_epi32(64);
        for (c = 0; c + 8 <= k; c += 8) {
            __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xr + c), by)), zero);
            __m128i halves = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
            _mm_storel_epi64((__m128i *)(ur + c), _mm_packus_epi16(halves, halves));
        }
        for (; c < k; c++)  /* the same rounding as the vector conversion: to nearest, ties to even */
            ur[c] = (uint8_t)(_mm_cvtss_si32(_mm_set_ss(xr[c] * inverse)) + 64);
        for (; c < kp; c++)
            ur[c] = 64;
    }
}

/* acc + each group of 4 byte products u_k w_k summed: one instruction with VNNI (AVX512-VNNI's on 256 bits, or
   AVX-VNNI's), three without; the same exact int32 sums either way. */
static inline __attribute__((always_inline)) __m256i dot4(__m256i acc, __m256i u, __m256i w) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, w);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, w);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, w), _mm256_set1_epi16(1)));
#endif
}

/* `rows` (<= ROWS) rows of u against `vectors` (<= VECTORS) blocks of 8 outputs from n0 (w: the first block's
   packed bytes), scaled back into y. Called with constant rows and vectors, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void block(const uint8_t *u, long kp, const int8_t *w, const int rows,
                                                        const int vectors, const float *scale, const int32_t *colsum,
                                                        const float *w_scale, const float *bias, float *y, long n,
                                                        long n0) {
    __m256i acc[ROWS][VECTORS];
    for (int i = 0; i < rows; i++)
        for (int v = 0; v < vectors; v++)
            acc[i][v] = _mm256_setzero_si256();
    for (long j = 0; j < kp / 4; j++) {
        __m256i b[VECTORS];
        for (int v = 0; v < vectors; v++)
            b[v] = _mm256_loadu_si256((const __m256i *)(w + v * kp * 8 + j * 32));
        for (int i = 0; i < rows; i++) {
            __m256i a = _mm256_set1_epi32(*(const int32_t *)(u + i * kp + j * 4));
            for (int v = 0; v < vectors; v++)
                acc[i][v] = dot4(acc[i][v], a, b[v]);
        }
    }
    for (int v = 0; v < vectors; v++) {
        long c0 = n0 + 8 * v;
        __m256i offset = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(colsum + c0)), 6); /* 64 colsum */
        __m256 t = _mm256_loadu_ps(w_scale + c0), b = _mm256_loadu_ps(bias + c0);
        for (int i = 0; i < rows; i++) {
            __m256 sum = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i][v], offset));
            __m256 out = _mm256_fmadd_ps(sum, _mm256_mul_ps(t, _mm256_set1_ps(scale[i])), b);
            if (c0 + 8 <= n) {
                _mm256_storeu_ps(y + i * n + c0, out);
            } else {
                float lanes[8];
                _mm256_storeu_ps(lanes, out);
                for (long c = c0; c < n; c++)
                    y[i * n + c] = lanes[c - c0];
            }
        }
    }
}

/* Rows p0..p1 of the panel u (its row p0 first) against `vectors` blocks of outputs from block b0: ROWS at a time. */
static inline __attribute__((always_inline)) void panel_blocks(const uint8_t *u, long p0, long p1, long kp,
                                                               const int8_t *packed, long b0, const int vectors,
                                                               const float *scale, const int32_t *colsum,
                                                               const float *w_scale, const float *bias, float *y,
                                                               long n) {
    const int8_t *w = packed + b0 * kp * 8;
    long r = p0;
    for (; r + ROWS <= p1; r += ROWS)
        block(u + (r - p0) * kp, kp, w, ROWS, vectors, scale + (r - p0), colsum, w_scale, bias, y + r * n, n, b0 * 8);
    for (; r < p1; r++)
        block(u + (r - p0) * kp, kp, w, 1, vectors, scale + (r - p0), colsum, w_scale, bias, y + r * n, n, b0 * 8);
}

/* y (rows, n) = x (rows, k) W^T + b, W packed as above (kp = k rounded up to 4; colsum, w_scale and bias padded to
   n rounded up to 8). Returns 0, or -1 if the panel's buffer could not be allocated. */
int int8_linear(const float *x, long rows, long k, long kp, const int8_t *packed, const int32_t *colsum,
                const float *w_scale, const float *bias, long n, float *y) {
    long blocks = (n + 7) / 8, panel = rows < PANEL ? rows : PANEL;
    uint8_t *u = malloc((size_t)(panel > 0 ? panel : 1) * (size_t)kp);
    float *scale = malloc(sizeof(float) * (size_t)(panel > 0 ? panel : 1));
    if (u == NULL || scale == NULL) {
        free(u);
        free(scale);
        return -1;
    }
    for (long p0 = 0; p0 < rows; p0 += PANEL) {
        long p1 = p0 + PANEL < rows ? p0 + PANEL : rows, b = 0;
        quantize_rows(x + p0 * k, p1 - p0, k, kp, u, scale);
        for (; b + VECTORS <= blocks; b += VECTORS)
            panel_blocks(u, p0, p1, kp, packed, b, VECTORS, scale, colsum, w_scale, bias, y, n);
        for (; b < blocks; b++)  /* the last few blocks, one at a time */
            panel_blocks(u, p0, p1, kp, packed, b, 1, scale, colsum, w_scale, bias, y, n);
    }
    free(u);
    free(scale);
    return 0;
}

#else /* no AVX2 at compile time: the kernel is absent, and int8 decoding keeps torch's engines */

int int8_kernel(void) { return 0; }

int int8_linear(const float *x, long rows, long k, long kp, const int8_t *packed, const int32_t *colsum,
                const float *w_scale, const float *bias, long n, float *y) {
    (void)x, (void)rows, (void)k, (void)kp, (void)packed, (void)colsum, (void)w_scale, (void)bias, (void)n, (void)y;
    return -2;
}

#endif
