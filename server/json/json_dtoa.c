/*
 * Grisu2 (Florian Loitsch, "Printing Floating-Point Numbers Quickly and
 * Accurately with Integers", PLDI 2010) followed by the same digit layout
 * rules as rapidjson's Writer, so FP32/FP64 outputs print exactly as Triton
 * prints them (0.1f widened to double -> 0.10000000149011612, 2.0 -> 2.0).
 * The output always reads back (strtod) as the same double.
 */
#include "json_dtoa.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef struct diyfp {
    uint64_t f;
    int e;
} diyfp;

#define DIYFP_SIGNIFICAND_BITS 52
#define DIYFP_HIDDEN_BIT ((uint64_t)1 << DIYFP_SIGNIFICAND_BITS)
#define DIYFP_SIGNIFICAND_MASK (DIYFP_HIDDEN_BIT - 1)
#define DIYFP_EXPONENT_BIAS (0x3FF + DIYFP_SIGNIFICAND_BITS)

/* 10^k for k = -348 + 8 i (i = 0..86) as a normalized 64-bit significand
 * rounded to nearest and a binary exponent: 10^k ~= f * 2^e. Generated with
 * exact rational arithmetic (Python fractions). */
static const diyfp cached_powers[87] = {
    {0xfa8fd5a0081c0288ULL, -1220}, {0xbaaee17fa23ebf76ULL, -1193},
    {0x8b16fb203055ac76ULL, -1166}, {0xcf42894a5dce35eaULL, -1140},
    {0x9a6bb0aa55653b2dULL, -1113}, {0xe61acf033d1a45dfULL, -1087},
    {0xab70fe17c79ac6caULL, -1060}, {0xff77b1fcbebcdc4fULL, -1034},
    {0xbe5691ef416bd60cULL, -1007}, {0x8dd01fad907ffc3cULL, -980},
    {0xd3515c2831559a83ULL, -954},  {0x9d71ac8fada6c9b5ULL, -927},
    {0xea9c227723ee8bcbULL, -901},  {0xaecc49914078536dULL, -874},
    {0x823c12795db6ce57ULL, -847},  {0xc21094364dfb5637ULL, -821},
    {0x9096ea6f3848984fULL, -794},  {0xd77485cb25823ac7ULL, -768},
    {0xa086cfcd97bf97f4ULL, -741},  {0xef340a98172aace5ULL, -715},
    {0xb23867fb2a35b28eULL, -688},  {0x84c8d4dfd2c63f3bULL, -661},
    {0xc5dd44271ad3cdbaULL, -635},  {0x936b9fcebb25c996ULL, -608},
    {0xdbac6c247d62a584ULL, -582},  {0xa3ab66580d5fdaf6ULL, -555},
    {0xf3e2f893dec3f126ULL, -529},  {0xb5b5ada8aaff80b8ULL, -502},
    {0x87625f056c7c4a8bULL, -475},  {0xc9bcff6034c13053ULL, -449},
    {0x964e858c91ba2655ULL, -422},  {0xdff9772470297ebdULL, -396},
    {0xa6dfbd9fb8e5b88fULL, -369},  {0xf8a95fcf88747d94ULL, -343},
    {0xb94470938fa89bcfULL, -316},  {0x8a08f0f8bf0f156bULL, -289},
    {0xcdb02555653131b6ULL, -263},  {0x993fe2c6d07b7facULL, -236},
    {0xe45c10c42a2b3b06ULL, -210},  {0xaa242499697392d3ULL, -183},
    {0xfd87b5f28300ca0eULL, -157},  {0xbce5086492111aebULL, -130},
    {0x8cbccc096f5088ccULL, -103},  {0xd1b71758e219652cULL, -77},
    {0x9c40000000000000ULL, -50},   {0xe8d4a51000000000ULL, -24},
    {0xad78ebc5ac620000ULL, 3},     {0x813f3978f8940984ULL, 30},
    {0xc097ce7bc90715b3ULL, 56},    {0x8f7e32ce7bea5c70ULL, 83},
    {0xd5d238a4abe98068ULL, 109},   {0x9f4f2726179a2245ULL, 136},
    {0xed63a231d4c4fb27ULL, 162},   {0xb0de65388cc8ada8ULL, 189},
    {0x83c7088e1aab65dbULL, 216},   {0xc45d1df942711d9aULL, 242},
    {0x924d692ca61be758ULL, 269},   {0xda01ee641a708deaULL, 295},
    {0xa26da3999aef774aULL, 322},   {0xf209787bb47d6b85ULL, 348},
    {0xb454e4a179dd1877ULL, 375},   {0x865b86925b9bc5c2ULL, 402},
    {0xc83553c5c8965d3dULL, 428},   {0x952ab45cfa97a0b3ULL, 455},
    {0xde469fbd99a05fe3ULL, 481},   {0xa59bc234db398c25ULL, 508},
    {0xf6c69a72a3989f5cULL, 534},   {0xb7dcbf5354e9beceULL, 561},
    {0x88fcf317f22241e2ULL, 588},   {0xcc20ce9bd35c78a5ULL, 614},
    {0x98165af37b2153dfULL, 641},   {0xe2a0b5dc971f303aULL, 667},
    {0xa8d9d1535ce3b396ULL, 694},   {0xfb9b7cd9a4a7443cULL, 720},
    {0xbb764c4ca7a44410ULL, 747},   {0x8bab8eefb6409c1aULL, 774},
    {0xd01fef10a657842cULL, 800},   {0x9b10a4e5e9913129ULL, 827},
    {0xe7109bfba19c0c9dULL, 853},   {0xac2820d9623bf429ULL, 880},
    {0x80444b5e7aa7cf85ULL, 907},   {0xbf21e44003acdd2dULL, 933},
    {0x8e679c2f5e44ff8fULL, 960},   {0xd433179d9c8cb841ULL, 986},
    {0x9e19db92b4e31ba9ULL, 1013},  {0xeb96bf6ebadf77d9ULL, 1039},
    {0xaf87023b9bf0ee6bULL, 1066},
};

static const uint32_t pow10_u32[] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

static const uint64_t pow10_u64[20] = {1ULL,
                                       10ULL,
                                       100ULL,
                                       1000ULL,
                                       10000ULL,
                                       100000ULL,
                                       1000000ULL,
                                       10000000ULL,
                                       100000000ULL,
                                       1000000000ULL,
                                       10000000000ULL,
                                       100000000000ULL,
                                       1000000000000ULL,
                                       10000000000000ULL,
                                       100000000000000ULL,
                                       1000000000000000ULL,
                                       10000000000000000ULL,
                                       100000000000000000ULL,
                                       1000000000000000000ULL,
                                       10000000000000000000ULL};

static diyfp diyfp_from_double(double d) {
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    int biased_e = (int)((bits >> DIYFP_SIGNIFICAND_BITS) & 0x7FF);
    uint64_t significand = bits & DIYFP_SIGNIFICAND_MASK;
    diyfp r;
    if (biased_e != 0) {
        r.f = significand + DIYFP_HIDDEN_BIT;
        r.e = biased_e - DIYFP_EXPONENT_BIAS;
    } else {
        r.f = significand;
        r.e = 1 - DIYFP_EXPONENT_BIAS;
    }
    return r;
}

static diyfp diyfp_normalize(diyfp x) {
    int shift = __builtin_clzll(x.f);
    x.f <<= shift;
    x.e -= shift;
    return x;
}

/* 64x64 -> upper 64 bits, rounded half up (as Grisu requires). */
static diyfp diyfp_mul(diyfp a, diyfp b) {
    unsigned __int128 p = (unsigned __int128)a.f * b.f;
    uint64_t h = (uint64_t)(p >> 64);
    uint64_t l = (uint64_t)p;
    if (l & ((uint64_t)1 << 63))
        h++;
    diyfp r = {h, a.e + b.e + 64};
    return r;
}

/* The boundaries m- and m+ of v (halfway to its neighbours), both with the
 * exponent of the normalized m+. */
static void diyfp_boundaries(diyfp v, diyfp *minus, diyfp *plus) {
    diyfp pl = {(v.f << 1) + 1, v.e - 1};
    while (!(pl.f & (DIYFP_HIDDEN_BIT << 1))) {
        pl.f <<= 1;
        pl.e--;
    }
    pl.f <<= 64 - DIYFP_SIGNIFICAND_BITS - 2;
    pl.e -= 64 - DIYFP_SIGNIFICAND_BITS - 2;
    diyfp mi;
    if (v.f == DIYFP_HIDDEN_BIT) {
        mi.f = (v.f << 2) - 1;
        mi.e = v.e - 2;
    } else {
        mi.f = (v.f << 1) - 1;
        mi.e = v.e - 1;
    }
    mi.f <<= mi.e - pl.e;
    mi.e = pl.e;
    *plus = pl;
    *minus = mi;
}

/* Cached power c with e + c.e + 64 in [-60, -32]; *k is its decimal
 * exponent negated (so that v * c ~= v * 10^-k... i.e. digits * 10^k). */
static diyfp cached_power(int e, int *k) {
    double dk = (-61 - e) * 0.30102999566398114 + 347;
    int ik = (int)dk;
    if (dk - ik > 0.0)
        ik++;
    unsigned index = (unsigned)((ik >> 3) + 1);
    *k = -(-348 + (int)(index << 3));
    return cached_powers[index];
}

static int count_decimal_digits(uint32_t n) {
    int d = 1;
    while (d < 10 && n >= pow10_u32[d])
        d++;
    return d;
}

static void grisu_round(char *buf, int len, uint64_t delta, uint64_t rest,
                        uint64_t ten_kappa, uint64_t wp_w) {
    while (rest < wp_w && delta - rest >= ten_kappa &&
           (rest + ten_kappa < wp_w || wp_w - rest > rest + ten_kappa - wp_w)) {
        buf[len - 1]--;
        rest += ten_kappa;
    }
}

static void digit_gen(diyfp w, diyfp mp, uint64_t delta, char *buf, int *len,
                      int *k) {
    diyfp one = {(uint64_t)1 << -mp.e, mp.e};
    uint64_t wp_w = mp.f - w.f;
    uint32_t p1 = (uint32_t)(mp.f >> -one.e);
    uint64_t p2 = mp.f & (one.f - 1);
    int kappa = count_decimal_digits(p1);
    *len = 0;

    while (kappa > 0) {
        uint32_t div = pow10_u32[kappa - 1];
        uint32_t d = p1 / div;
        p1 %= div;
        if (d || *len)
            buf[(*len)++] = (char)('0' + d);
        kappa--;
        uint64_t tmp = ((uint64_t)p1 << -one.e) + p2;
        if (tmp <= delta) {
            *k += kappa;
            grisu_round(buf, *len, delta, tmp,
                        (uint64_t)pow10_u32[kappa] << -one.e, wp_w);
            return;
        }
    }
    for (;;) {
        p2 *= 10;
        delta *= 10;
        char d = (char)(p2 >> -one.e);
        if (d || *len)
            buf[(*len)++] = (char)('0' + d);
        p2 &= one.f - 1;
        kappa--;
        if (p2 < delta) {
            *k += kappa;
            int index = -kappa;
            grisu_round(buf, *len, delta, p2, one.f,
                        wp_w * (index < 20 ? pow10_u64[index] : 0));
            return;
        }
    }
}

/* Digits of a positive finite v into buf, value = digits * 10^k. */
static void grisu2(double value, char *buf, int *len, int *k) {
    diyfp v = diyfp_from_double(value);
    diyfp w_m, w_p;
    diyfp_boundaries(v, &w_m, &w_p);
    diyfp c_mk = cached_power(w_p.e, k);
    diyfp w = diyfp_mul(diyfp_normalize(v), c_mk);
    diyfp wp = diyfp_mul(w_p, c_mk);
    diyfp wm = diyfp_mul(w_m, c_mk);
    wm.f++;
    wp.f--;
    digit_gen(w, wp, wp.f - wm.f, buf, len, k);
}

static size_t write_exponent(int k, char *buf) {
    size_t n = 0;
    if (k < 0) {
        buf[n++] = '-';
        k = -k;
    }
    if (k >= 100) {
        buf[n++] = (char)('0' + k / 100);
        k %= 100;
        buf[n++] = (char)('0' + k / 10);
        buf[n++] = (char)('0' + k % 10);
    } else if (k >= 10) {
        buf[n++] = (char)('0' + k / 10);
        buf[n++] = (char)('0' + k % 10);
    } else {
        buf[n++] = (char)('0' + k);
    }
    return n;
}

/* Lays out `len` digits with decimal exponent k (value = digits * 10^k). */
static size_t prettify(char *buf, int len, int k) {
    int kk = len + k; /* 10^(kk-1) <= v < 10^kk */
    if (k >= 0 && kk <= 21) {
        /* 1234e7 -> 12340000000.0 */
        for (int i = len; i < kk; i++)
            buf[i] = '0';
        buf[kk] = '.';
        buf[kk + 1] = '0';
        return (size_t)kk + 2;
    }
    if (kk > 0 && kk <= 21) {
        /* 1234e-2 -> 12.34 */
        memmove(&buf[kk + 1], &buf[kk], (size_t)(len - kk));
        buf[kk] = '.';
        return (size_t)len + 1;
    }
    if (kk > -6 && kk <= 0) {
        /* 1234e-6 -> 0.001234 */
        int offset = 2 - kk;
        memmove(&buf[offset], &buf[0], (size_t)len);
        buf[0] = '0';
        buf[1] = '.';
        for (int i = 2; i < offset; i++)
            buf[i] = '0';
        return (size_t)(len + offset);
    }
    if (len == 1) {
        /* 1e30 */
        buf[1] = 'e';
        return 2 + write_exponent(kk - 1, &buf[2]);
    }
    /* 1234e30 -> 1.234e33 */
    memmove(&buf[2], &buf[1], (size_t)(len - 1));
    buf[1] = '.';
    buf[len + 1] = 'e';
    return (size_t)len + 2 + write_exponent(kk - 1, &buf[len + 2]);
}

size_t json_dtoa(double value, char *buf) {
    if (isnan(value)) {
        memcpy(buf, "NaN", 3);
        return 3;
    }
    if (isinf(value)) {
        if (value < 0) {
            memcpy(buf, "-Infinity", 9);
            return 9;
        }
        memcpy(buf, "Infinity", 8);
        return 8;
    }
    size_t n = 0;
    if (signbit(value)) {
        buf[n++] = '-';
        value = -value;
    }
    if (value == 0.0) {
        memcpy(&buf[n], "0.0", 3);
        return n + 3;
    }
    int len, k;
    grisu2(value, &buf[n], &len, &k);
    return n + prettify(&buf[n], len, k);
}
