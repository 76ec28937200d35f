// The decoder forward pass's kernels (crates/repgeom-cuda/src/forward.rs launches them; the
// matrix products are cuBLAS's). Activations are f32, row-major [rows, cols]; a weight is f32,
// bf16 or f16 (DT_F32, DT_BF16, DT_F16), read through ld(). Each kernel computes what
// repgeom-extract's CPU path computes, in f32, with the CPU's formulas and order of operations
// within an element (--fmad=false keeps products and sums rounded apart, as on the CPU);
// reductions over a row (norms, softmax, log-sum-exp) add in a different order than the CPU's
// SIMD lanes, which moves the last bits.

#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2
#define ROW_THREADS 256
// -infinity and a quiet NaN without math.h's macros (NVRTC has no math.h).
#define NEG_INF __uint_as_float(0xff800000u)
#define QUIET_NAN ((double)__uint_as_float(0x7fc00000u))

extern "C" {

// f16 bits to f32 (normals, subnormals, infinities, NaN), without cuda_fp16.h.
__device__ __forceinline__ float f16_to_f32(unsigned short h) {
    u32 sign = (u32)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    u32 bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        // subnormal: value man * 2^-24, exact in f32
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return __uint_as_float(bits);
}

// f32 to bf16 bits, rounding to nearest even (NaN stays NaN).
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    u32 b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((b >> 16) | 0x40u);
    b += 0x7fffu + ((b >> 16) & 1u);
    return (unsigned short)(b >> 16);
}

// f32 to f16 bits, rounding to nearest even; overflow to infinity, underflow through
// subnormals to zero.
__device__ __forceinline__ unsigned short f32_to_f16(float f) {
    u32 b = __float_as_uint(f);
    u32 sign = (b >> 16) & 0x8000u;
    u32 a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u); // rounds past 65504
    if (a < 0x38800000u) {
        // below the smallest normal (2^-14): a subnormal multiple of 2^-24, nearest even
        if (a < 0x33000000u) return (unsigned short)sign; // below 2^-25: to zero
        u32 e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        u32 shift = 126u - e; // 14..24 bits dropped from a 24-bit significand
        u32 q = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (q & 1u))) ++q;
        return (unsigned short)(sign | q);
    }
    u32 r = a - 0x38000000u; // rebias the exponent from 127 to 15
    r += 0xfffu + ((r >> 13) & 1u);
    return (unsigned short)(sign | (r >> 13));
}

// Element i of a weight stored as dtype dt.
__device__ __forceinline__ float ld(const void* p, u64 i, int dt) {
    if (dt == DT_BF16) return __uint_as_float((u32)((const unsigned short*)p)[i] << 16);
    if (dt == DT_F16) return f16_to_f32(((const unsigned short*)p)[i]);
    return ((const float*)p)[i];
}

// out[r, :] = table[ids[r], :] widened to f32: the embedding lookup. Grid: rows.
__global__ void embed_rows(const void* table, int dt, const u32* ids, float* out, u32 d) {
    u32 r = blockIdx.x;
    u64 src = (u64)ids[r] * d, dst = (u64)r * d;
    for (u32 c = threadIdx.x; c < d; c += blockDim.x) out[dst + c] = ld(table, src + c, dt);
}

// h[r, :] += pos[r % t, :] (GPT-2's learned positions, rows of a [B, t, d] batch). Grid: rows.
__global__ void add_positions(float* h, const void* pos, int dt, u32 t, u32 d) {
    u32 r = blockIdx.x;
    u64 src = (u64)(r % t) * d, dst = (u64)r * d;
    for (u32 c = threadIdx.x; c < d; c += blockDim.x) h[dst + c] = h[dst + c] + ld(pos, src + c, dt);
}

// x *= s, element by element.
__global__ void scale_all(float* x, float s, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * s;
}

// y[r, c] += b[c]: a linear layer's bias. Grid: rows.
__global__ void add_bias(float* y, const float* b, u32 cols) {
    u64 at = (u64)blockIdx.x * cols;
    for (u32 c = threadIdx.x; c < cols; c += blockDim.x) y[at + c] = y[at + c] + b[c];
}

// a += b (op 0), a *= b (op 1), element by element.
__global__ void combine(float* a, const float* b, u64 n, int op) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    a[i] = op == 0 ? a[i] + b[i] : a[i] * b[i];
}

// x = clamp(x, -c, c) (OLMo's clip_qkv).
__global__ void clamp_all(float* x, float c, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = fminf(fmaxf(x[i], -c), c);
}

// x = act(x): 0 exact GELU x Φ(x), 1 GELU's tanh form, 2 ReLU, 3 SiLU (repgeom-extract's
// Activation, in its order), with the CPU's formulas.
__global__ void activate(float* x, u64 n, int kind) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    if (kind == 0) {
        float e = erfcf(fabsf(v) * 0.70710677f);
        float phi = v >= 0.0f ? 1.0f - 0.5f * e : 0.5f * e;
        x[i] = v * phi;
    } else if (kind == 1) {
        float y = 0.7978846f * (v + 0.044715f * (v * v * v));
        x[i] = v / (1.0f + expf(-2.0f * y));
    } else if (kind == 2) {
        x[i] = v > 0.0f ? v : 0.0f;
    } else {
        x[i] = v / (1.0f + expf(-v));
    }
}

// Narrows x to bf16 (dt 1) or f16 (dt 2) bits, for a product with a weight of that dtype.
__global__ void narrow_to(const float* x, unsigned short* y, u64 n, int dt) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = dt == DT_BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
}

// The sum of v over the block's ROW_THREADS threads, in double, every thread getting it.
__device__ double block_sum(double v, double* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (u32 s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
        __syncthreads();
    }
    double total = scratch[0];
    __syncthreads();
    return total;
}

// The maximum of v over the block's threads, every thread getting it.
__device__ float block_max(float v, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (u32 s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        __syncthreads();
    }
    float m = scratch[0];
    __syncthreads();
    return m;
}

// Layer norm (b != 0) or RMS norm (b == 0) of each row, candle's formulas: the mean and the
// variance (or the mean square) over the row, y = (x - mean) * (1 / sqrt(var + eps)) * w + b,
// or y = x / sqrt(mean(x^2) + eps) * w. The statistics summed in double (the variance around
// the mean, in two passes) and rounded to f32. Grid: rows, ROW_THREADS threads.
__global__ void norm_rows(const float* x, float* y, const float* w, const float* b, u32 cols,
                          float eps) {
    __shared__ double scratch[ROW_THREADS];
    u64 at = (u64)blockIdx.x * cols;
    float mean = 0.0f;
    if (b) {
        double s = 0.0;
        for (u32 c = threadIdx.x; c < cols; c += blockDim.x) s += (double)x[at + c];
        mean = (float)(block_sum(s, scratch) / (double)cols);
    }
    double s2 = 0.0;
    for (u32 c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = x[at + c] - mean;
        s2 += (double)v * (double)v;
    }
    float var = (float)(block_sum(s2, scratch) / (double)cols);
    float m = sqrtf(var + eps), inv = 1.0f / m;
    for (u32 c = threadIdx.x; c < cols; c += blockDim.x)
        y[at + c] = b ? (x[at + c] - mean) * inv * w[c] + b[c] : x[at + c] / m * w[c];
}

// Gathers one of q, k, v from a projection into heads, [B, H, T, hd], rotating the first rot
// dimensions of each head (rotate-half, cos and sin [T, rot / 2]; rot = 0: none). Source
// row (b, t) is src[(b T + t) * src_cols]; head h of the destination reads the source head
// h / rep (grouped-query attention repeats each key/value head rep times) at column
// col0 + (h / rep) * stride. Grid: (B T, H), threads over hd.
__global__ void gather_heads(const float* src, u32 src_cols, u32 col0, u32 stride, u32 rep,
                             float* dst, u32 t, u32 heads, u32 hd, const float* cos,
                             const float* sin, u32 rot) {
    u32 row = blockIdx.x, h = blockIdx.y;
    u32 b = row / t, pos = row % t;
    const float* s = src + (u64)row * src_cols + col0 + (u64)(h / rep) * stride;
    float* o = dst + (((u64)b * heads + h) * t + pos) * hd;
    u32 half = rot / 2;
    for (u32 c = threadIdx.x; c < hd; c += blockDim.x) {
        float v = s[c];
        if (c < half) {
            float cs = cos[(u64)pos * half + c], sn = sin[(u64)pos * half + c];
            v = s[c] * cs - s[c + half] * sn;
        } else if (c < rot) {
            float cs = cos[(u64)pos * half + c - half], sn = sin[(u64)pos * half + c - half];
            v = s[c] * cs + s[c - half] * sn;
        }
        o[c] = v;
    }
}

// Attention scores to probabilities, in place, one row [T] of one (batch, head) per block:
// with a cap (cap > 0, Gemma-2) s = cap * tanh(s * pre / cap) (pre is applied only there: the
// host passes 1 without a cap), then softmax of s * scale over the keys j <= i (and
// i - j < window when window > 0); masked keys get 0. Grid: B H T rows.
__global__ void masked_softmax(float* scores, u32 t, float pre, float cap, float scale,
                               u32 window) {
    __shared__ double scratch[ROW_THREADS];
    __shared__ float mscratch[ROW_THREADS];
    u64 r = blockIdx.x;
    u32 i = (u32)(r % t);
    u32 lo = (window > 0 && i + 1 > window) ? i + 1 - window : 0;
    float* row = scores + r * t;
    float m = NEG_INF;
    for (u32 j = threadIdx.x; j < t; j += blockDim.x) {
        if (j < lo || j > i) continue;
        float v = row[j];
        if (cap > 0.0f) v = tanhf((v * pre) / cap) * cap;
        v = v * scale;
        row[j] = v;
        m = fmaxf(m, v);
    }
    m = block_max(m, mscratch);
    double s = 0.0;
    for (u32 j = threadIdx.x; j < t; j += blockDim.x) {
        if (j < lo || j > i) continue;
        float e = expf(row[j] - m);
        row[j] = e;
        s += (double)e;
    }
    float inv = 1.0f / (float)block_sum(s, scratch);
    for (u32 j = threadIdx.x; j < t; j += blockDim.x)
        row[j] = (j < lo || j > i) ? 0.0f : row[j] * inv;
}

// Heads [B, H, T, hd] back to rows [B T, H hd]. Grid: (B T, H), threads over hd.
__global__ void merge_heads(const float* y, float* out, u32 t, u32 heads, u32 hd) {
    u32 row = blockIdx.x, h = blockIdx.y;
    u32 b = row / t, pos = row % t;
    const float* s = y + (((u64)b * heads + h) * t + pos) * hd;
    float* o = out + (u64)row * heads * hd + (u64)h * hd;
    for (u32 c = threadIdx.x; c < hd; c += blockDim.x) o[c] = s[c];
}

// One row's next-token loss from its logits over a block of the vocabulary: with Phi's bias
// (bias != 0) and Gemma-2's final soft cap (cap > 0) applied as the CPU applies them, the
// row's maximum (f32), the sum of e^(x - max) (double) and the target's logit if it lies in
// [v0, v0 + nv). part[r] = (max, sum, target logit or NaN). Grid: rows of the block.
__global__ void loss_part(const float* logits, const float* bias, float cap, const u32* targets,
                          u32 v0, u32 nv, double* part) {
    __shared__ double scratch[ROW_THREADS];
    __shared__ float mscratch[ROW_THREADS];
    u64 r = blockIdx.x;
    const float* row = logits + r * nv;
    u32 target = targets[r];
    float m = NEG_INF;
    double hit = 0.0;
    int found = 0;
    for (u32 j = threadIdx.x; j < nv; j += blockDim.x) {
        float v = row[j];
        if (bias) v = v + bias[v0 + j];
        if (cap > 0.0f) v = tanhf(v / cap) * cap;
        m = fmaxf(m, v);
        if (v0 + j == target) hit = (double)v, found = 1;
    }
    m = block_max(m, mscratch);
    double s = 0.0;
    for (u32 j = threadIdx.x; j < nv; j += blockDim.x) {
        float v = row[j];
        if (bias) v = v + bias[v0 + j];
        if (cap > 0.0f) v = tanhf(v / cap) * cap;
        s += (double)expf(v - m);
    }
    s = block_sum(s, scratch);
    double t = block_sum(found ? hit : 0.0, scratch);
    double any = block_sum(found ? 1.0 : 0.0, scratch);
    if (threadIdx.x == 0) {
        part[3 * r] = (double)m;
        part[3 * r + 1] = s;
        part[3 * r + 2] = any > 0.0 ? t : QUIET_NAN;
    }
}

} // extern "C"

// ---------------------------------------------------------------------------------------------
// Pair metrics' permutation null (crates/repgeom-cuda/src/pairs.rs): kernel matrices, N x N
// row-major and symmetric, `count` of them one after another.

extern "C" {

// m[c][i][i] = 0 for every matrix c. Grid: (ceil(n / 256), count).
__global__ void zero_diagonal(float* m, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) m[(u64)blockIdx.y * n * n + (u64)i * n + i] = 0.0f;
}

// out[c][i][j] = b[c][perm[i]][perm[j]] off the diagonal, 0 on it: matrix c with its points
// relabelled. Grid: (n rows, count), threads over j.
__global__ void permute_sym(const float* b, const u32* perm, float* out, u32 n) {
    u32 i = blockIdx.x;
    u64 base = (u64)blockIdx.y * n * n;
    const float* src = b + base + (u64)perm[i] * n;
    float* dst = out + base + (u64)i * n;
    for (u32 j = threadIdx.x; j < n; j += blockDim.x) dst[j] = j == i ? 0.0f : src[perm[j]];
}

// out[c] = sum over k of part[k * cells + c], in double, in k order. One thread per cell.
__global__ void sum_chunks(const float* part, double* out, u32 chunks, u32 cells) {
    u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cells) return;
    double s = 0.0;
    for (u32 k = 0; k < chunks; ++k) s += (double)part[(u64)k * cells + c];
    out[c] = s;
}

} // extern "C"
