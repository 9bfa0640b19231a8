// Weight-only int8 products for ONE token (a decode step), accumulated exactly or in float32.
//
//   unlimited_ocr_int8_gemv:       y[n] = scale[n] * sum_k w[n, k] * x[k]
//   unlimited_ocr_int8_gated_mlp:  y = sum_j weight_j * D_j (silu(G_j x) * (U_j x))   (experts or one MLP)
//
// A decode step on a CPU streams every int8 weight row once; what bounds it is how fast the rows are read and
// turned into products. Three builds of the row kernel, picked at run time by the caller (isa code):
//   3  AVX-512 VNNI: x is rounded to 16-bit integers (one scale per vector, relative error ~3e-5) and split into
//      a high and a low byte; _mm512_dpbusd_epi32 multiplies 64 weight bytes by 64 activation bytes at a time
//      (three of them per 64 weights: high bytes, low bytes, and the row sum that undoes the high bytes' +128
//      offset), exact in int32. Measured on the project's 2-core machine: 1792 x 1280 in 117 us (19.7 GB/s)
//      against 165 us for build 2 and ~250 us for PyTorch's _weight_int8pack_mm (which rounds x to bfloat16,
//      relative error ~3e-3).
//   2  AVX-512: each weight widened to float32 and multiplied with float32 x (16 per register).
//   1  AVX2 + FMA: the same, 8 per register, for CPUs without AVX-512.
// Eight rows at a time share each activation load, and each row is prefetched PREFETCH_BYTES ahead (8 rows + 512
// bytes: ~15 GB/s in build 2 where 4 rows made 13 and no prefetch 11; prefetching the next block linearly was
// slower, 9.3). The gated MLP runs all of a layer's chosen experts in one OpenMP region (gate/up rows of every
// expert, a barrier, silu * up, a barrier, the down rows summed over experts), where one call per matrix paid a
// fork/join and a Python round trip 12 times per layer. Threads come from the libgomp PyTorch already loaded
// (same soname): one thread pool. Built by unlimited_ocr/model/native/__init__.py with the system C++ compiler.
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int ROWS = 8;
constexpr int PREFETCH_BYTES = 512;

inline void prefetch_rows(const int8_t* w, int64_t K, int64_t k) {
    for (int r = 0; r < ROWS; r++) _mm_prefetch((const char*)(w + r * K + k + PREFETCH_BYTES), _MM_HINT_T0);
}

// ---- float32 activations (builds 1 and 2) ----
struct FloatActivation {
    const float* x;
};

struct Avx512 {
    using Activation = FloatActivation;
    static int64_t scratch_bytes(int64_t) { return 0; }
    static Activation prepare(const float* x, int64_t, uint8_t*) { return {x}; }

    // out[r] = sum_k w[r * K + k] * x[k] for the 8 rows from w
    __attribute__((target("avx512f,avx512bw"), noinline))
    static void dots8(const int8_t* w, int64_t K, const Activation& a, float* out) {
        const int64_t K64 = K / 64 * 64;
        __m512 acc[ROWS];
        for (int r = 0; r < ROWS; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t k = 0; k < K64; k += 64) {
            prefetch_rows(w, K, k);
            for (int j = 0; j < 64; j += 16) {
                const __m512 xv = _mm512_loadu_ps(a.x + k + j);
                for (int r = 0; r < ROWS; r++) {
                    const __m128i packed = _mm_loadu_si128((const __m128i*)(w + r * K + k + j));  // 16 x int8
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(packed)), xv, acc[r]);
                }
            }
        }
        for (int r = 0; r < ROWS; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + dot(w + r * K, K64, K, a);
    }

    // sum over k in [k, K) of w[k] * x[k] (one row, or a row's tail)
    __attribute__((target("avx512f,avx512bw"), noinline))
    static float dot(const int8_t* w, int64_t k, int64_t K, const Activation& a) {
        __m512 acc = _mm512_setzero_ps();
        for (; k + 16 <= K; k += 16) {
            const __m128i packed = _mm_loadu_si128((const __m128i*)(w + k));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(packed)), _mm512_loadu_ps(a.x + k), acc);
        }
        float sum = _mm512_reduce_add_ps(acc);
        for (; k < K; k++) sum += (float)w[k] * a.x[k];
        return sum;
    }
};

struct Avx2 {
    using Activation = FloatActivation;
    static int64_t scratch_bytes(int64_t) { return 0; }
    static Activation prepare(const float* x, int64_t, uint8_t*) { return {x}; }

    __attribute__((target("avx2,fma")))
    static inline float hsum(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        return _mm_cvtss_f32(s);
    }

    __attribute__((target("avx2,fma"), noinline))
    static void dots8(const int8_t* w, int64_t K, const Activation& a, float* out) {
        const int64_t K64 = K / 64 * 64;
        __m256 acc[ROWS];
        for (int r = 0; r < ROWS; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t k = 0; k < K64; k += 64) {
            prefetch_rows(w, K, k);
            for (int j = 0; j < 64; j += 8) {
                const __m256 xv = _mm256_loadu_ps(a.x + k + j);
                for (int r = 0; r < ROWS; r++) {
                    const __m128i packed = _mm_loadl_epi64((const __m128i*)(w + r * K + k + j));  // 8 x int8
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(packed)), xv, acc[r]);
                }
            }
        }
        for (int r = 0; r < ROWS; r++) out[r] = hsum(acc[r]) + dot(w + r * K, K64, K, a);
    }

    __attribute__((target("avx2,fma"), noinline))
    static float dot(const int8_t* w, int64_t k, int64_t K, const Activation& a) {
        __m256 acc = _mm256_setzero_ps();
        for (; k + 8 <= K; k += 8) {
            const __m128i packed = _mm_loadl_epi64((const __m128i*)(w + k));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(packed)), _mm256_loadu_ps(a.x + k), acc);
        }
        float sum = hsum(acc);
        for (; k < K; k++) sum += (float)w[k] * a.x[k];
        return sum;
    }
};

// ---- 16-bit integer activations split into bytes (build 3) ----
// x[k] ~= scale * q[k], q = round(x / scale) in [-32767, 32767], q = 256 * (hi[k] - 128) + lo[k] with hi, lo
// unsigned bytes. Then sum_k w q = 256 * sum w hi - 32768 * sum w + sum w lo: three unsigned x signed byte dot
// products, each exact in int32 (|sum w hi| <= 255 * 128 * K < 2^31 for K <= VNNI_MAX_COLUMNS; longer rows go to
// the float32 build).
constexpr int64_t VNNI_MAX_COLUMNS = 65536;
struct SplitActivation {
    const uint8_t* hi;
    const uint8_t* lo;
    float scale;
};

struct Avx512Vnni {
    using Activation = SplitActivation;
    static int64_t scratch_bytes(int64_t K) { return 2 * (K + 64); }

    static Activation prepare(const float* x, int64_t K, uint8_t* scratch) {
        uint8_t* hi = scratch;
        uint8_t* lo = scratch + K + 64;
        float amax = 0.0f;
        bool finite = true;
        for (int64_t k = 0; k < K; k++) {
            amax = fmaxf(amax, fabsf(x[k]));
            finite = finite && isfinite(x[k]);
        }
        // A NaN or infinity in x makes every output NaN, as a float product would (instead of rounding it to 0).
        const float scale = !finite ? NAN : amax > 0.0f ? amax / 32767.0f : 1.0f;
        const float inverse = 1.0f / scale;
        for (int64_t k = 0; k < K; k++) {
            const int32_t q = finite ? (int32_t)lrintf(x[k] * inverse) : 0;
            lo[k] = (uint8_t)(q & 0xFF);
            hi[k] = (uint8_t)((q >> 8) + 128);  // arithmetic shift: floor(q / 256) in [-128, 127]
        }
        return {hi, lo, scale};
    }

    __attribute__((target("avx512f,avx512bw,avx512vnni")))
    static inline float finish(__m512i high, __m512i low, __m512i sum, float scale) {
        const int64_t value = 256 * (int64_t)_mm512_reduce_add_epi32(high)
                              - 32768 * (int64_t)_mm512_reduce_add_epi32(sum) + (int64_t)_mm512_reduce_add_epi32(low);
        return scale * (float)value;
    }

    // 64 weights of a row (masked past K: masked bytes are not read) into the three accumulators.
    __attribute__((target("avx512f,avx512bw,avx512vnni")))
    static inline void step(const int8_t* w, const SplitActivation& a, int64_t k, __mmask64 mask, __m512i& high,
                            __m512i& low, __m512i& sum) {
        const __m512i weights = _mm512_maskz_loadu_epi8(mask, w + k);
        high = _mm512_dpbusd_epi32(high, _mm512_maskz_loadu_epi8(mask, a.hi + k), weights);
        low = _mm512_dpbusd_epi32(low, _mm512_maskz_loadu_epi8(mask, a.lo + k), weights);
        sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), weights);
    }

    __attribute__((target("avx512f,avx512bw,avx512vnni"), noinline))
    static void dots8(const int8_t* w, int64_t K, const Activation& a, float* out) {
        const int64_t K64 = K / 64 * 64;
        const __m512i ones = _mm512_set1_epi8(1);
        __m512i high[ROWS], low[ROWS], sum[ROWS];
        for (int r = 0; r < ROWS; r++) high[r] = low[r] = sum[r] = _mm512_setzero_si512();
        for (int64_t k = 0; k < K64; k += 64) {
            prefetch_rows(w, K, k);
            const __m512i h = _mm512_loadu_si512((const void*)(a.hi + k));
            const __m512i l = _mm512_loadu_si512((const void*)(a.lo + k));
            for (int r = 0; r < ROWS; r++) {
                const __m512i weights = _mm512_loadu_si512((const void*)(w + r * K + k));  // 64 x int8
                high[r] = _mm512_dpbusd_epi32(high[r], h, weights);
                low[r] = _mm512_dpbusd_epi32(low[r], l, weights);
                sum[r] = _mm512_dpbusd_epi32(sum[r], ones, weights);
            }
        }
        if (K64 < K) {
            const __mmask64 mask = (1ULL << (K - K64)) - 1;  // 0 < K - K64 < 64
            for (int r = 0; r < ROWS; r++) step(w + r * K, a, K64, mask, high[r], low[r], sum[r]);
        }
        for (int r = 0; r < ROWS; r++) out[r] = finish(high[r], low[r], sum[r], a.scale);
    }

    __attribute__((target("avx512f,avx512bw,avx512vnni"), noinline))
    static float dot(const int8_t* w, int64_t k, int64_t K, const Activation& a) {
        __m512i high = _mm512_setzero_si512(), low = high, sum = high;
        for (; k < K; k += 64) {
            const __mmask64 mask = K - k >= 64 ? ~0ULL : (1ULL << (K - k)) - 1;
            step(w, a, k, mask, high, low, sum);
        }
        return finish(high, low, sum, a.scale);
    }
};

// Rows [first, first + count) of w (N, K) against a, scaled: out[i] = scale[first + i] * dot(w[first + i], x).
template <class Isa>
inline void scaled_rows(const int8_t* w, const float* scale, int64_t first, int64_t count, int64_t K,
                        const typename Isa::Activation& a, float* out) {
    if (count == ROWS) {
        float dots[ROWS];
        Isa::dots8(w + first * K, K, a, dots);
        for (int r = 0; r < ROWS; r++) out[r] = scale[first + r] * dots[r];
    } else {
        for (int64_t r = 0; r < count; r++) out[r] = scale[first + r] * Isa::dot(w + (first + r) * K, 0, K, a);
    }
}

inline int64_t blocks_of(int64_t n) { return (n + ROWS - 1) / ROWS; }
inline int64_t block_rows(int64_t n, int64_t block) { return n - block * ROWS < ROWS ? n - block * ROWS : ROWS; }

struct Scratch {  // 64-byte aligned bytes, freed on return
    uint8_t* data;
    explicit Scratch(int64_t bytes) : data(bytes ? (uint8_t*)aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr) {}
    ~Scratch() { free(data); }
};

template <class Isa>
int gemv(const float* x, const int8_t* w, const float* scale, float* y, int64_t N, int64_t K, int threads) {
    Scratch scratch(Isa::scratch_bytes(K));
    if (Isa::scratch_bytes(K) && !scratch.data) return -2;
    const typename Isa::Activation a = Isa::prepare(x, K, scratch.data);
    const int64_t blocks = blocks_of(N);
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; b++) scaled_rows<Isa>(w, scale, b * ROWS, block_rows(N, b), K, a, y + b * ROWS);
    return 0;
}

template <class Isa>
int gated_mlp(const float* x, int64_t H, int64_t I, int count, const int8_t* const* gate,
              const float* const* gate_scale, const int8_t* const* up, const float* const* up_scale,
              const int8_t* const* down, const float* const* down_scale, const float* weights, float* scratch,
              float* y, int threads) {
    float* gates = scratch;            // (count, I)
    float* ups = scratch + count * I;  // (count, I); becomes silu(gate) * up in place
    const int64_t per_input = Isa::scratch_bytes(H), per_inner = Isa::scratch_bytes(I);
    Scratch bytes(per_input + count * per_inner);
    if (per_input + count * per_inner && !bytes.data) return -2;
    typename Isa::Activation inputs = Isa::prepare(x, H, bytes.data);
    typename Isa::Activation* inners = (typename Isa::Activation*)malloc(count * sizeof(typename Isa::Activation));
    if (!inners) return -2;
    const int64_t in_blocks = blocks_of(I);
    const int64_t out_blocks = blocks_of(H);
    #pragma omp parallel num_threads(threads)
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < 2 * count * in_blocks; t++) {  // every gate and up row of every expert
            const int64_t j = t / (2 * in_blocks), rest = t % (2 * in_blocks);
            const bool is_up = rest >= in_blocks;
            const int64_t b = is_up ? rest - in_blocks : rest;
            scaled_rows<Isa>(is_up ? up[j] : gate[j], is_up ? up_scale[j] : gate_scale[j], b * ROWS,
                             block_rows(I, b), H, inputs, (is_up ? ups : gates) + j * I + b * ROWS);
        }
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < count * I; i++) ups[i] *= gates[i] / (1.0f + expf(-gates[i]));  // silu(g) * u
        #pragma omp for schedule(static)
        for (int j = 0; j < count; j++)
            inners[j] = Isa::prepare(ups + j * I, I, bytes.data + per_input + j * per_inner);
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < out_blocks; b++) {  // output rows, summed over the experts
            const int64_t rows = block_rows(H, b);
            float acc[ROWS] = {0}, part[ROWS];
            for (int j = 0; j < count; j++) {
                scaled_rows<Isa>(down[j], down_scale[j], b * ROWS, rows, I, inners[j], part);
                for (int64_t r = 0; r < rows; r++) acc[r] += weights[j] * part[r];
            }
            for (int64_t r = 0; r < rows; r++) y[b * ROWS + r] = acc[r];
        }
    }
    free(inners);
    return 0;
}

}  // namespace

extern "C" {

// isa: 3 = AVX-512 VNNI, 2 = AVX-512, 1 = AVX2 + FMA (the caller checked the CPU).
// Return 0; -1 for an unknown isa, -2 when scratch memory could not be allocated.
int unlimited_ocr_int8_gemv(int isa, const float* x, const int8_t* w, const float* scale, float* y, int64_t N,
                            int64_t K, int threads) {
    if (isa == 3 && K > VNNI_MAX_COLUMNS) isa = 2;
    switch (isa) {
        case 3: return gemv<Avx512Vnni>(x, w, scale, y, N, K, threads);
        case 2: return gemv<Avx512>(x, w, scale, y, N, K, threads);
        case 1: return gemv<Avx2>(x, w, scale, y, N, K, threads);
        default: return -1;
    }
}

// count experts j of the same shapes: gate[j], up[j] (I, H) int8 with scales (I,), down[j] (H, I) with scales (H,);
// x (H,), weights (count,), scratch (2 * count * I,) float32; y (H,) is written (not accumulated).
int unlimited_ocr_int8_gated_mlp(int isa, const float* x, int64_t H, int64_t I, int count,
                                 const int8_t* const* gate, const float* const* gate_scale, const int8_t* const* up,
                                 const float* const* up_scale, const int8_t* const* down,
                                 const float* const* down_scale, const float* weights, float* scratch, float* y,
                                 int threads) {
    if (isa == 3 && (H > VNNI_MAX_COLUMNS || I > VNNI_MAX_COLUMNS)) isa = 2;
    switch (isa) {
        case 3: return gated_mlp<Avx512Vnni>(x, H, I, count, gate, gate_scale, up, up_scale, down, down_scale,
                                             weights, scratch, y, threads);
        case 2: return gated_mlp<Avx512>(x, H, I, count, gate, gate_scale, up, up_scale, down, down_scale,
                                         weights, scratch, y, threads);
        case 1: return gated_mlp<Avx2>(x, H, I, count, gate, gate_scale, up, up_scale, down, down_scale,
                                       weights, scratch, y, threads);
        default: return -1;
    }
}

}
