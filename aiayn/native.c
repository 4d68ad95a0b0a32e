/* Eq. 1, softmax(q K^T / sqrt(d_k)) V, for a decoding step: one query per decoder row and head, over that row's
   cached keys and values (self-attention) or its sentence's (cross-attention). Compiled by aiayn/native.py at first
   use (-O3 -march=native); each loop over a head's d_k or d_v numbers is vectorized by the compiler (omp simd).

   Where torch runs each row's 1 x d_k by d_k x t product as its own matrix-vector call (or, below 400 multiply-adds,
   a scalar loop), these walk the cache once, in memory order, and keep the scores in a small buffer. The sums run in
   another order than a matmul's and exp is a polynomial (below): equal to torch's eq. 1 to rounding. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* exp(x) for x <= 0 without a library call, so that loops over it vectorize: x = n ln 2 + r, |r| <= ln 2 / 2,
   exp(r) by Cephes' degree-6 polynomial for expf, times 2^n set in the exponent bits: within 1 ulp of the correctly
   rounded exp on [-87, 0] (checked at 20 million points). */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x / ln 2): 1.5 * 2^23 drops the bits */
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;               /* ln 2 in two parts, exact to float */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* scores[0..length) <- softmax(scores); masked positions hold -INFINITY and get weight 0. */
static void softmax(float *scores, int length) {
    float top = -INFINITY, sum = 0.0f;
    for (int t = 0; t < length; t++)
        top = scores[t] > top ? scores[t] : top;
#pragma omp simd reduction(+ : sum)
    for (int t = 0; t < length; t++) {
        float e = scores[t] == -INFINITY ? 0.0f : exp_nonpositive(scores[t] - top);
        scores[t] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
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

/* Cross-attention: `group` decoder rows (a sentence's beams) per source sentence, rows sentence-major. keys
   (sentences, heads, length, d_k) and values (sentences, heads, length, d_v), contiguous; mask (sentences, length),
   nonzero where a row may attend, or NULL for all. q (rows, heads, d_k), out (rows, heads, d_v). A sentence's keys
   and values for one head are read for all its rows while they are in cache. Returns 0, or -1 as above. */
int cross_attention(const float *q, const float *keys, const float *values, const unsigned char *mask, float *out,
                    int sentences, int group, int heads, int length, int d_k, int d_v, float sqrt_d_k) {
    float *scores = malloc(sizeof(float) * (size_t)group * (size_t)length); /* (group, length) */
    if (!scores)
        return -1;
    for (int s = 0; s < sentences; s++) {
        const unsigned char *m = mask ? mask + (long)s * length : NULL;
        for (int h = 0; h < heads; h++) {
            const float *k = keys + ((long)s * heads + h) * length * d_k;
            const float *v = values + ((long)s * heads + h) * length * d_v;
            for (int t = 0; t < length; t++)
                for (int j = 0; j < group; j++) {
                    const float *qj = q + (((long)s * group + j) * heads + h) * d_k;
                    float score = dot(qj, k + (long)t * d_k, d_k) / sqrt_d_k;
                    scores[(long)j * length + t] = m && !m[t] ? -INFINITY : score;
                }
            for (int j = 0; j < group; j++) {
                float *w = scores + (long)j * length, *o = out + (((long)s * group + j) * heads + h) * d_v;
                softmax(w, length);
                memset(o, 0, sizeof(float) * d_v);
                for (int t = 0; t < length; t++)
                    add_scaled(o, w[t], v + (long)t * d_v, d_v);
            }
        }
    }
    free(scores);
    return 0;
}
