"""C helpers every generated kernel starts with (dtype conversions and vectorisable math), and those some include:
vector types and the block transpose."""

PRELUDE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>

/* gcc's jump threading copies blocks across long chains of selects until the vectoriser sees control flow */
#if defined(__GNUC__) && !defined(__clang__)
#define LUM_NO_THREADING __attribute__((optimize("no-thread-jumps")))
#else
#define LUM_NO_THREADING
#endif

static inline float lum_u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline float lum_i2f(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline uint32_t lum_f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

#if defined(__FLT16_MAX__)
static inline float lum_h2f(uint16_t h) { _Float16 f; memcpy(&f, &h, 2); return (float)f; }
static inline uint16_t lum_f2h(float x) { _Float16 f = (_Float16)x; uint16_t h; memcpy(&h, &f, 2); return h; }
static inline float lum_rf16(float x) { return (float)(_Float16)x; }
#else
static inline float lum_h2f(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) { float v = (float)m * 5.9604644775390625e-8f; return s ? -v : v; }
    if (e == 31) return lum_u2f(s | 0x7f800000u | (m << 13));
    return lum_u2f(s | ((e + 112) << 23) | (m << 13));
}
static inline uint16_t lum_f2h(float f) {
    uint32_t x = lum_f2u(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00);
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) return (uint16_t)(sign | (uint32_t)lrintf(lum_u2f(ax) * 16777216.0f));
    return (uint16_t)(sign | ((ax + 0xfffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13));
}
static inline float lum_rf16(float x) { return lum_h2f(lum_f2h(x)); }
#endif

static inline float lum_bf2f(uint16_t h) { return lum_u2f((uint32_t)h << 16); }
static inline uint16_t lum_f2bf(float x) {
    uint32_t u = lum_f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float lum_rbf(float x) { return lum_bf2f(lum_f2bf(x)); }

/* 2**x: x rounded to the nearest integer n by adding 1.5 * 2**23 (the sum's low mantissa bits are n, so no
   conversion is needed), a degree-6 polynomial of the rest in [-0.5, 0.5] (rel. error < 2e-7), scaled by two exact
   powers of two so that overflow gives inf and underflow denormals/0; a NaN stays NaN through the polynomial. */
static inline float lum_exp2(float x) {
    float xc = x < -151.0f ? -151.0f : x;
    xc = xc > 129.0f ? 129.0f : xc;
    float r = xc + 12582912.0f;
    float f = xc - (r - 12582912.0f);
    float p = 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    int32_t i = (int32_t)(lum_f2u(r) - 0x4b400000u);
    int32_t i1 = i >> 1, i2 = i - i1;
    return p * lum_u2f((uint32_t)(i1 + 127) << 23) * lum_u2f((uint32_t)(i2 + 127) << 23);
}

/* log2(x): x = m * 2**e with m in [sqrt(1/2), sqrt(2)), ln(m) by the Cephes logf polynomial (rel. error
   about 1e-7), branch-free so it vectorises; denormals are scaled up first; 0 -> -inf, < 0 -> nan. */
static inline float lum_log2(float x) {
    int tiny = x < 1.17549435e-38f;
    float xs = tiny ? x * 8388608.0f : x;
    int32_t i;
    memcpy(&i, &xs, 4);
    int32_t e = ((i >> 23) & 0xff) - 127 - (tiny ? 23 : 0);
    float m = lum_i2f((i & 0x007fffff) | 0x3f800000);
    int big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    float fe = (float)e + (big ? 1.0f : 0.0f);
    float f = m - 1.0f, z = f * f;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z - 0.5f * z;
    float r = (f + y) * 1.44269504088896341f + fe;
    r = x == 0.0f ? -INFINITY : r;
    r = x < 0.0f ? NAN : r;
    r = x == INFINITY ? INFINITY : r;
    return x != x ? x : r;
}

static inline int64_t lum_f2i64(float x) {
    if (!(x == x) || isinf(x)) return 0;
    if (x >= 9223372036854775807.0f) return INT64_MAX;
    if (x <= -9223372036854775808.0f) return INT64_MIN;
    return (int64_t)x;
}
static inline int32_t lum_f2i32(float x) {
    if (!(x == x) || isinf(x)) return 0;
    if (x >= 2147483647.0f) return INT32_MAX;
    if (x <= -2147483648.0f) return INT32_MIN;
    return (int32_t)x;
}
static inline int64_t lum_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t lum_max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* floor and ceiling of a / b for b > 0 */
static inline int64_t lum_fdiv(int64_t a, int64_t b) { int64_t q = a / b; return q - (a % b != 0 && a < 0); }
static inline int64_t lum_cdiv(int64_t a, int64_t b) { return -lum_fdiv(-a, b); }
"""


def block_transpose(vw: int) -> list[str]:
    """lum_tr: d[j*ld + i] = s[i*ls + j] for i < rows, j < cols, by VW x VW blocks: each stage swaps the
    off-diagonal sub-blocks of pairs of rows (two-vector shuffles), whole blocks in log2(VW) stages; over the
    element and vector types the kernel defines (lum_t, lum_v, lum_vu)."""
    stages = []
    st = vw // 2
    while st >= 1:
        lo = [x if not x & st else vw + x - st for x in range(vw)]
        hi = [x + st if not x & st else vw + x for x in range(vw)]
        stages.append((st, lo, hi))
        st //= 2
    L = [f"typedef int32_t lum_sv __attribute__((vector_size({vw * 4})));",
         "static inline void lum_tr(const lum_t *restrict s, int64_t ls, int64_t rows, int64_t cols,",
         "                          lum_t *restrict d, int64_t ld) {",
         "    int64_t i0 = 0;",
         f"    for (; i0 + {vw} <= rows; i0 += {vw}) {{",
         "        int64_t j0 = 0;",
         f"        for (; j0 + {vw} <= cols; j0 += {vw}) {{"]
    L += [f"            lum_v r{i} = *(const lum_vu *)(s + (i0 + {i}) * ls + j0);" for i in range(vw)]
    for st, lo, hi in stages:
        L.append(f"            {{ const lum_sv lo = {{{', '.join(map(str, lo))}}}, hi = {{{', '.join(map(str, hi))}}};")
        L += [f"              {{ lum_v a = r{i}, b = r{i + st}; r{i} = __builtin_shuffle(a, b, lo); "
              f"r{i + st} = __builtin_shuffle(a, b, hi); }}" for i in range(vw) if not i & st]
        L.append("            }")
    L += [f"            *(lum_vu *)(d + (j0 + {i}) * ld + i0) = r{i};" for i in range(vw)]
    L.append("        }")
    L += ["        for (int64_t j = j0; j < cols; j++)",
          f"            for (int64_t i = i0; i < i0 + {vw}; i++) d[j * ld + i] = s[i * ls + j];",
          "    }",
          "    for (int64_t i = i0; i < rows; i++) for (int64_t j = 0; j < cols; j++) d[j * ld + i] = s[i * ls + j];",
          "}"]
    return L


def shuffle(a: str, b: str, index: list[int], ints: str = "lum_bi") -> list[str]:
    """A vector helper's return of the lanes ``index`` of the concatenation of ``a`` and ``b`` (and its end);
    ``ints`` the vectors' integer type."""
    idx = ", ".join(map(str, index))
    return ["#if defined(__clang__)", f"    return __builtin_shufflevector({a}, {b}, {idx});", "#else",
            f"    return __builtin_shuffle({a}, {b}, ({ints}){{{idx}}});" if b != a else
            f"    return __builtin_shuffle({a}, ({ints}){{{idx}}});", "#endif", "}"]


def pair_shuffle(name: str, elem: str, vec: str, vecu: str, ints: str, vw: int, index: list[int]) -> list[str]:
    """``name(p)``: the lanes ``index`` of the two vectors (``vec``, ``vw`` lanes of ``elem``) from ``p``, read
    unaligned (``vecu``); ``ints`` the vectors' integer type."""
    return [f"static inline {vec} {name}(const {elem} *p) {{",
            f"    {vec} a = *(const {vecu} *)p, b = *(const {vecu} *)(p + {vw});", *shuffle("a", "b", index, ints)]


def vector_types(elem: str, vw: int) -> list[str]:
    """The element type lum_t and its vectors of ``vw`` lanes, aligned (lum_v) and not (lum_vu)."""
    return [f"typedef {elem} lum_t;",
            f"typedef lum_t lum_v __attribute__((vector_size({vw * 4})));",
            f"typedef lum_t lum_vu __attribute__((vector_size({vw * 4}), aligned(4)));"]
