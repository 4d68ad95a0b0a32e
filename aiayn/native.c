/* Eq. 1, softmax(q K^T / sqrt(d_k)) V, for a decoding step: one query per decoder row and head, over that row's
   cached keys and values (self-attention) or its sentence's (cross-attention). Compiled by aiayn/native.py at first
   use (-O3 -march=native). The self-attention's loops over a head's d_k or d_v numbers are vectorized by the
   compiler (omp simd); the softmax and the cross-attention are written in vectors of 8 numbers (GCC's and Clang's
   vector extension), eight positions' scores at a time against keys held transposed, their sums in several vector
   registers at once so that no multiply-add waits for the one before.

   Where torch runs each row's 1 x d_k by d_k x t product as its own matrix-vector call (or, below 400 multiply-adds,
   a scalar loop), these walk the cache once, in memory order, and keep the scores in a small buffer. The sums run in
   another order than a matmul's and exp is a polynomial (below): equal to torch's eq. 1 to rounding.

   Two helpers of a search follow, exact where torch's ops read or move one number at a time: greedy search's argmax
   (row_argmax) and a reorder's copies of cache rows (move_rows). */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Eight numbers in a vector register (GCC's and Clang's vector extension: AVX's ymm registers where the CPU has
   them, two SSE registers elsewhere); loads and stores of them at any address. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

static inline v8 load8(const float *p) { return *(const v8u *)p; }
static inline void store8(float *p, v8 x) { *(v8u *)p = x; }

typedef int32_t v8i __attribute__((vector_size(32)));

/* exp(x) of eight numbers x <= 0 without a library call: x = n ln 2 + r, |r| <= ln 2 / 2, exp(r) by Cephes'
   degree-6 polynomial for expf, times 2^n set in the exponent bits: within 1 ulp of the correctly rounded exp on
   [-87, 0] (checked at 20 million points); below -87, exp(-87). */
static inline v8 exp_nonpositive(v8 x) {
    v8i below = x < -87.0f;
    x = (v8)(((v8i)x & ~below) | ((v8i)((v8){0} - 87.0f) & below));
    v8 n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln 2): 1.5 * 2^23 drops the bits */
    v8 r = x - n * 0.693359375f + n * 2.12194440e-4f;               /* ln 2 in two parts, exact to float */
    v8 p = (v8){0} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * (v8)((__builtin_convertvector(n, v8i) + 127) << 23);
}

/* The weights of eight scores s whose largest is top: exp(s - top), 0 where s is -INFINITY (masked). */
static inline v8 weights8(v8 s, float top) {
    return (v8)((v8i)exp_nonpositive(s - top) & ~(s == -INFINITY));
}

/* scores[0..length) <- softmax(scores); masked positions hold -INFINITY and get weight 0. Eight at a time, the
   last length % 8 through a padded copy. */
static void softmax(float *scores, int length) {
    float top = -INFINITY;
#pragma omp simd reduction(max : top)
    for (int t = 0; t < length; t++)
        top = scores[t] > top ? scores[t] : top;
    v8 sums = {0};
    int t = 0;
    for (; t + 8 <= length; t += 8) {
        v8 w = weights8(load8(scores + t), top);
        store8(scores + t, w);
        sums += w;
    }
    if (t < length) {
        float rest[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
        memcpy(rest, scores + t, sizeof(float) * (size_t)(length - t));
        v8 w = weights8(load8(rest), top);
        store8(rest, w);
        memcpy(scores + t, rest, sizeof(float) * (size_t)(length - t));
        sums += w;
    }
    float inv = 1.0f / (((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7])));
#pragma omp simd
    for (int t = 0; t < length; t++)
        scores[t] *= inv;
}

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static inline void add_scaled(float *out, float p, const float *v, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++)
        out[i] += p * v[i];
}

/* Self-attention over a time-major cache. A position's keys are `units` = rows * heads vectors of d_k numbers, one
   after the other (unit u: row u / heads, head u % heads), and position t's start `key_stride` numbers after t-1's
   (the buffer has room for more rows than `rows`); values likewise with d_v. q: the units' queries (units, d_k);
   out: (units, d_v). Each position's block is read once, in order, for the scores and then for the values.
   Returns 0, or -1 if the scores' buffer could not be allocated. */
int self_attention(const float *q, const float *keys, long key_stride, const float *values, long value_stride,
                   float *out, int units, int length, int d_k, int d_v, float sqrt_d_k) {
    float *scores = malloc(sizeof(float) * (size_t)units * (size_t)length); /* (units, length) */
    if (!scores)
        return -1;
    for (int t = 0; t < length; t++) {
        const float *k = keys + t * key_stride;
        for (int u = 0; u < units; u++)
            scores[(long)u * length + t] = dot(q + (long)u * d_k, k + (long)u * d_k, d_k) / sqrt_d_k;
    }
    for (int u = 0; u < units; u++) {
        softmax(scores + (long)u * length, length);
        memset(out + (long)u * d_v, 0, sizeof(float) * d_v);
    }
    for (int t = 0; t < length; t++) {
        const float *v = values + t * value_stride;
        for (int u = 0; u < units; u++)
            add_scaled(out + (long)u * d_v, scores[(long)u * length + t], v + (long)u * d_v, d_v);
    }
    free(scores);
    return 0;
}

/* scores[t] = q . k_t for t < stride, keys held transposed: kt (d_k, stride), row d holding every position's d-th
   number. Eight positions at a time, their sums over d_k in four vector registers (four chains, so that each
   multiply-add need not wait for the one before); where stride is not a multiple of 8, the last positions one at a
   time. */
static void scores_of(const float *q, const float *kt, int stride, int d_k, float *scores) {
    int t0 = 0;
    for (; t0 + 16 <= stride; t0 += 16) { /* two blocks of 8, four chains each */
        v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        const float *k = kt + t0;
        int d = 0;
        for (; d + 4 <= d_k; d += 4) {
            const float *k0 = k + (long)d * stride, *k1 = k0 + stride, *k2 = k1 + stride, *k3 = k2 + stride;
            a0 += q[d] * load8(k0);
            b0 += q[d] * load8(k0 + 8);
            a1 += q[d + 1] * load8(k1);
            b1 += q[d + 1] * load8(k1 + 8);
            a2 += q[d + 2] * load8(k2);
            b2 += q[d + 2] * load8(k2 + 8);
            a3 += q[d + 3] * load8(k3);
            b3 += q[d + 3] * load8(k3 + 8);
        }
        for (; d < d_k; d++) {
            a0 += q[d] * load8(k + (long)d * stride);
            b0 += q[d] * load8(k + (long)d * stride + 8);
        }
        store8(scores + t0, (a0 + a1) + (a2 + a3));
        store8(scores + t0 + 8, (b0 + b1) + (b2 + b3));
    }
    for (; t0 + 8 <= stride; t0 += 8) {
        v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *k = kt + t0;
        int d = 0;
        for (; d + 4 <= d_k; d += 4) {
            a0 += q[d] * load8(k + (long)d * stride);
            a1 += q[d + 1] * load8(k + (long)(d + 1) * stride);
            a2 += q[d + 2] * load8(k + (long)(d + 2) * stride);
            a3 += q[d + 3] * load8(k + (long)(d + 3) * stride);
        }
        for (; d < d_k; d++)
            a0 += q[d] * load8(k + (long)d * stride);
        store8(scores + t0, (a0 + a1) + (a2 + a3));
    }
    for (; t0 < stride; t0++) {
        float a = 0.0f;
        for (int d = 0; d < d_k; d++)
            a += q[d] * kt[(long)d * stride + t0];
        scores[t0] = a;
    }
}

/* out[i0 .. i0 + 8R) = sum over t of w[t] v[t][i0 .. i0 + 8R), in R vector registers (R chains). */
static inline __attribute__((always_inline)) void weighted_chunk(const float *w, const float *v, int length, int d_v,
                                                                 int i0, float *out, const int R) {
    v8 acc[8] = {{0}};
    for (int t = 0; t < length; t++) {
        const float *vt = v + (long)t * d_v + i0;
        for (int r = 0; r < R; r++)
            acc[r] += w[t] * load8(vt + 8 * r);
    }
    for (int r = 0; r < R; r++)
        store8(out + i0 + 8 * r, acc[r]);
}

/* out[0..d_v) = sum over t < length of w[t] v[t][:] (v: length rows of d_v numbers). */
static void weighted_values(const float *w, const float *v, int length, int d_v, float *out) {
    int i0 = 0;
    for (; i0 + 64 <= d_v; i0 += 64)
        weighted_chunk(w, v, length, d_v, i0, out, 8);
    if (i0 + 32 <= d_v) {
        weighted_chunk(w, v, length, d_v, i0, out, 4);
        i0 += 32;
    }
    if (i0 + 16 <= d_v) {
        weighted_chunk(w, v, length, d_v, i0, out, 2);
        i0 += 16;
    }
    if (i0 + 8 <= d_v) {
        weighted_chunk(w, v, length, d_v, i0, out, 1);
        i0 += 8;
    }
    for (; i0 < d_v; i0++) {
        float a = 0.0f;
        for (int t = 0; t < length; t++)
            a += w[t] * v[(long)t * d_v + i0];
        out[i0] = a;
    }
}

/* Cross-attention: `group` decoder rows (a sentence's beams) per source sentence, rows sentence-major. Keys held
   transposed, keys_t (sentences, heads, d_k, stride), stride >= length (the positions from length on are padding,
   never attended); values (sentences, heads, length, d_v); both contiguous. mask (sentences, length), nonzero where a
   row may attend, or NULL for all. q (rows, heads, d_k), out (rows, heads, d_v). A sentence's keys and values for one
   head stay in cache for all its rows. Returns 0, or -1 if the scores' buffer could not be allocated. */
int cross_attention(const float *q, const float *keys_t, int stride, const float *values, const unsigned char *mask,
                    float *out, int sentences, int group, int heads, int length, int d_k, int d_v, float sqrt_d_k) {
    float *scores = malloc(sizeof(float) * (size_t)stride);
    if (!scores)
        return -1;
    for (int s = 0; s < sentences; s++) {
        const unsigned char *m = mask ? mask + (long)s * length : NULL;
        for (int h = 0; h < heads; h++) {
            const float *kt = keys_t + ((long)s * heads + h) * stride * d_k;
            const float *v = values + ((long)s * heads + h) * length * d_v;
            for (int j = 0; j < group; j++) {
                long row = ((long)s * group + j) * heads + h;
                scores_of(q + row * d_k, kt, stride, d_k, scores);
#pragma omp simd
                for (int t = 0; t < length; t++)
                    scores[t] /= sqrt_d_k;
                if (m)
                    for (int t = 0; t < length; t++)
                        scores[t] = m[t] ? scores[t] : -INFINITY;
                for (int t = length; t < stride; t++) /* padding: weight 0, and the softmax runs whole vectors */
                    scores[t] = -INFINITY;
                softmax(scores, stride);
                weighted_values(scores, v, length, d_v, out + row * d_v);
            }
        }
    }
    free(scores);
    return 0;
}

/* The column of each row's largest number, the first where it occurs more than once (as torch.argmax; a row
   holding NaN: its first NaN, as torch.argmax): a greedy search's pick over a step's logits, x (rows, columns) with
   rows `stride` numbers apart. One pass for the maximum, eight columns at a time, then one to find it. */
void row_argmax(const float *x, long rows, long columns, long stride, int64_t *out) {
    for (long r = 0; r < rows; r++) {
        const float *a = x + r * stride;
        v8 top8 = (v8){0} - INFINITY;
        v8i nan8 = {0};
        long c = 0;
        for (; c + 8 <= columns; c += 8) {
            v8 v = load8(a + c);
            v8i greater = v > top8;
            top8 = (v8)(((v8i)v & greater) | ((v8i)top8 & ~greater));
            nan8 |= v != v;
        }
        float top = -INFINITY;
        int nan = 0;
        for (int i = 0; i < 8; i++) {
            top = top8[i] > top ? top8[i] : top;
            nan |= nan8[i] != 0;
        }
        for (; c < columns; c++) {
            top = a[c] > top ? a[c] : top;
            nan |= a[c] != a[c];
        }
        long k = 0;
        if (nan)
            while (a[k] == a[k]) k++;
        else
            while (a[k] != top) k++;
        out[r] = k;
    }
}

/* rows[into[e]] <- rows[source[e]] for each of `entries` pairs, every source read before any row is written (a beam
   that takes a sibling's prefix may read a row another beam overwrites): rows (count, width bytes). 2 where an index
   lies outside [0, count) (nothing written), 1 where memory ran out, else 0. */
int move_rows(char *rows, long count, long width, const int64_t *into, const int64_t *source, long entries) {
    for (long e = 0; e < entries; e++)
        if (into[e] < 0 || into[e] >= count || source[e] < 0 || source[e] >= count)
            return 2;
    char *held = malloc((size_t)(entries * width > 0 ? entries * width : 1));
    if (held == NULL)
        return 1;
    for (long e = 0; e < entries; e++)
        memcpy(held + e * width, rows + source[e] * width, (size_t)width);
    for (long e = 0; e < entries; e++)
        memcpy(rows + into[e] * width, held + e * width, (size_t)width);
    free(held);
    return 0;
}
