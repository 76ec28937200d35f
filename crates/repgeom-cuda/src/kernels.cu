// repgeom's CUDA kernels, compiled at run time by NVRTC (no compiler at build time). Every
// kernel is written to give the numbers repgeom's CPU path gives: the same f32 and f64
// operations in the same order where the CPU's order is fixed (row norms, the distance from a
// Gram entry, the sort keys), exact integer arithmetic for the Spearman sums. Compiled with
// --fmad=false, so no multiply-add is contracted where the CPU rounds twice.
//
// Layouts. The batch holds B draws. A draw's projection is an N x k column-major block, the
// draws side by side (entry (i, c) of draw b at P[(b * k + c) * N + i]). A draw's Gram matrix
// is N x N (G[b * N * N + c * N + r] is entry (r, c)). A draw's sort segment holds the
// M = N (N - 1) / 2 pairs i < j in condensed order (p = i N - i (i + 1) / 2 + j - i - 1), at
// offset b * M.

typedef unsigned int u32;
typedef unsigned long long u64;

#define TILE_THREADS 256
#define TILE_ITEMS 8
#define TILE (TILE_THREADS * TILE_ITEMS)
#define WARPS (TILE_THREADS / 32)

extern "C" {

// Squared norm of every row of every draw's projection, in f64: one thread per (row, draw).
__global__ void row_sq_norms(const float* p, double* out, u32 n, u32 k, u32 draws) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    u32 b = blockIdx.y;
    if (i >= n || b >= draws) return;
    const float* base = p + (u64)b * k * n;
    double s = 0.0;
    for (u32 c = 0; c < k; ++c) {
        double v = (double)base[(u64)c * n + i];
        s += v * v;
    }
    out[(u64)b * n + i] = s;
}

// Scales row i of draw b by scale[b * N + i] (computed in f64 on the host: 1 / norm), rounding
// the f64 product to f32, as the CPU's row normalisation does. In place.
__global__ void scale_rows(float* p, const double* scale, u32 n, u32 k, u32 draws) {
    u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 per = (u64)n * k;
    u32 b = blockIdx.y;
    if (e >= per || b >= draws) return;
    u32 i = (u32)(e % n);
    u64 at = (u64)b * per + e;
    p[at] = (float)((double)p[at] * scale[(u64)b * n + i]);
}

// repgeom_linalg's order_key: an order-preserving map of f32 to u32 (-0 counts as +0).
__device__ __forceinline__ u32 order_key(float v) {
    if (v == 0.0f) v = 0.0f;
    u32 b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The sort words of every pair i < j: key of the distance from the Gram entry, and the
// reference's doubled rank of the pair. Cosine: clamp(1 - g, 0, 2); Euclidean (sq holds the
// f32 squared row norms): sqrt(max(s_i + s_j - 2 g, 0)). One thread per (i, j): block x
// covers row i's columns j in tiles of blockDim.x, for coalesced reads of the Gram's column i
// and coalesced writes of the condensed row.
__global__ void pair_words(const float* gram, const float* sq, const u32* rank2, u32* keys,
                           u32* vals, u32 n, u32 jtiles, u32 draws, int euclidean) {
    u32 i = blockIdx.x / jtiles;
    u32 j = (blockIdx.x % jtiles) * blockDim.x + threadIdx.x;
    u32 b = blockIdx.y;
    if (i >= n || j >= n || j <= i || b >= draws) return;
    float g = gram[(u64)b * n * n + (u64)i * n + j];
    float dist;
    if (euclidean) {
        float si = sq[(u64)b * n + i];
        float sj = sq[(u64)b * n + j];
        dist = sqrtf(fmaxf(si + sj - 2.0f * g, 0.0f));
    } else {
        dist = fminf(fmaxf(1.0f - g, 0.0f), 2.0f);
    }
    u64 m = (u64)n * (n - 1) / 2;
    u64 p = (u64)i * n - (u64)i * (i + 1) / 2 + (j - i - 1);
    keys[(u64)b * m + p] = order_key(dist);
    vals[(u64)b * m + p] = rank2[p];
}

// One pass of the LSD radix sort of every draw's segment (8 bits at `shift`), step 1: the
// digit counts of each tile, written digit-major per draw (hist[(b * 256 + digit) * tiles +
// tile]) so that one exclusive scan per draw gives every tile's output offset per digit.
__global__ void radix_hist(const u32* keys, u32* hist, u64 m, u32 tiles, u32 shift) {
    __shared__ u32 counts[256];
    u32 tile = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    counts[t] = 0;
    __syncthreads();
    const u32* seg = keys + (u64)b * m;
    for (u32 it = 0; it < TILE_ITEMS; ++it) {
        u64 idx = (u64)tile * TILE + (u64)it * TILE_THREADS + t;
        if (idx < m) atomicAdd(&counts[(seg[idx] >> shift) & 255u], 1u);
    }
    __syncthreads();
    hist[((u64)b * 256 + t) * tiles + tile] = counts[t];
}

// Step 2: exclusive prefix sums of each draw's 256 * tiles counts, in place. One block of
// 1024 threads per draw; each thread sums a contiguous chunk, the chunk totals are scanned in
// shared memory, and each chunk is rewritten with its offset.
// 1024 threads per block: the bounds cap the registers so that the launch always fits.
__global__ void __launch_bounds__(1024) radix_scan(u32* hist, u32 len) {
    __shared__ u32 sums[1024];
    u32 b = blockIdx.x, t = threadIdx.x;
    u32* h = hist + (u64)b * len;
    u32 chunk = (len + 1023) / 1024;
    u32 lo = t * chunk;
    u32 hi = min(lo + chunk, len);
    u32 s = 0;
    for (u32 x = lo; x < hi; ++x) s += h[x];
    sums[t] = s;
    __syncthreads();
    for (u32 step = 1; step < 1024; step <<= 1) {
        u32 add = (t >= step) ? sums[t - step] : 0u;
        __syncthreads();
        sums[t] += add;
        __syncthreads();
    }
    u32 run = sums[t] - s;
    for (u32 x = lo; x < hi; ++x) {
        u32 v = h[x];
        h[x] = run;
        run += v;
    }
}

// Step 3: the stable scatter. A tile's items are taken in index order, 256 at a time; within
// a round a thread's place among equal digits is its rank among the warp's lanes with that
// digit (__match_any_sync) plus the counts of the earlier warps, after the counts of earlier
// rounds (`running`) and of earlier tiles (the scanned offsets).
__global__ void radix_scatter(const u32* keys_in, const u32* vals_in, u32* keys_out,
                              u32* vals_out, const u32* offsets, u64 m, u32 tiles, u32 shift) {
    __shared__ u32 running[256];
    __shared__ u32 warp_counts[WARPS][256];
    u32 tile = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    u32 lane = t & 31u, warp = t >> 5;
    running[t] = offsets[((u64)b * 256 + t) * tiles + tile];
    for (u32 w = 0; w < WARPS; ++w) warp_counts[w][t] = 0;
    __syncthreads();
    const u32* kin = keys_in + (u64)b * m;
    const u32* vin = vals_in + (u64)b * m;
    u32* kout = keys_out + (u64)b * m;
    u32* vout = vals_out + (u64)b * m;
    for (u32 it = 0; it < TILE_ITEMS; ++it) {
        u64 idx = (u64)tile * TILE + (u64)it * TILE_THREADS + t;
        bool valid = idx < m;
        u32 key = valid ? kin[idx] : 0u;
        u32 digit = valid ? ((key >> shift) & 255u) : 256u;
        u32 peers = __match_any_sync(0xffffffffu, digit);
        u32 below = __popc(peers & ((1u << lane) - 1u));
        if (valid && below == 0) warp_counts[warp][digit] = __popc(peers);
        __syncthreads();
        if (valid) {
            u32 pos = running[digit] + below;
            for (u32 w = 0; w < warp; ++w) pos += warp_counts[w][digit];
            kout[pos] = key;
            vout[pos] = vin[idx];
        }
        __syncthreads();
        u32 total = 0;
        for (u32 w = 0; w < WARPS; ++w) {
            total += warp_counts[w][t];
            warp_counts[w][t] = 0;
        }
        running[t] += total;
        __syncthreads();
    }
}

// Tie groups of the sorted keys, step 1, per tile: the last position in the tile that starts
// a group (or -1 when the tile continues the group open at its start), and the first end of a
// group in the tile (one past its last position; m + 1 when the tile's group runs past it).
__global__ void tie_bounds(const u32* keys, long long* last_start, long long* first_end, u64 m,
                           u32 tiles) {
    __shared__ long long smax[TILE_THREADS];
    __shared__ long long smin[TILE_THREADS];
    u32 tile = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const u32* seg = keys + (u64)b * m;
    long long mx = -1, mn = (long long)m + 1;
    for (u32 it = 0; it < TILE_ITEMS; ++it) {
        u64 p = (u64)tile * TILE + (u64)t * TILE_ITEMS + it;
        if (p >= m) break;
        if (p == 0 || seg[p] != seg[p - 1]) mx = max(mx, (long long)p);
        if (p + 1 == m || seg[p] != seg[p + 1]) mn = min(mn, (long long)p + 1);
    }
    smax[t] = mx;
    smin[t] = mn;
    __syncthreads();
    for (u32 step = TILE_THREADS / 2; step > 0; step >>= 1) {
        if (t < step) {
            smax[t] = max(smax[t], smax[t + step]);
            smin[t] = min(smin[t], smin[t + step]);
        }
        __syncthreads();
    }
    if (t == 0) {
        last_start[(u64)b * tiles + tile] = smax[0];
        first_end[(u64)b * tiles + tile] = smin[0];
    }
}

// Step 2, one thread per draw: the start of the group open at each tile's first position (a
// running max from the left) and the end of the group open at each tile's last position (a
// running min from the right), written over the step 1 values.
__global__ void tie_carry(long long* last_start, long long* first_end, u32 tiles, u32 draws) {
    u32 b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= draws) return;
    long long* ls = last_start + (u64)b * tiles;
    long long* fe = first_end + (u64)b * tiles;
    long long open = 0;
    for (u32 x = 0; x < tiles; ++x) {
        long long v = ls[x];
        ls[x] = open;
        if (v >= 0) open = v;
    }
    long long close = 0x7fffffffffffffffLL;
    for (u32 x = tiles; x-- > 0;) {
        long long v = fe[x];
        fe[x] = close;
        close = min(close, v);
    }
}

__device__ __forceinline__ void add128(u64& lo, u64& hi, u64 x) {
    lo += x;
    if (lo < x) hi += 1;
}

// Step 3, per tile: with s the start and e the end of each position's group and q2 its
// payload (twice the reference rank), the tile's sums of s * q2, e * q2 and j (j + 1) where
// j = p - s, in 128-bit integers (lo, hi words), at out[((b * tiles) + tile) * 6 ...]. These
// are the three sums repgeom_linalg's RankedReference turns into Spearman's rho.
__global__ void tie_sums(const u32* keys, const u32* vals, const long long* open_start,
                         const long long* open_end, u64* out, u64 m, u32 tiles) {
    __shared__ long long sstart[TILE_THREADS];
    __shared__ long long send[TILE_THREADS];
    __shared__ u64 acc[6][TILE_THREADS];
    u32 tile = blockIdx.x, b = blockIdx.y, t = threadIdx.x;
    const u32* seg = keys + (u64)b * m;
    const u32* q = vals + (u64)b * m;
    u64 first = (u64)tile * TILE + (u64)t * TILE_ITEMS;
    // This thread's last group start and first group end.
    long long mx = -1, mn = 0x7fffffffffffffffLL;
    for (u32 it = 0; it < TILE_ITEMS; ++it) {
        u64 p = first + it;
        if (p >= m) break;
        if (p == 0 || seg[p] != seg[p - 1]) mx = max(mx, (long long)p);
        if (p + 1 == m || seg[p] != seg[p + 1]) mn = min(mn, (long long)p + 1);
    }
    sstart[t] = mx;
    send[t] = mn;
    __syncthreads();
    // Inclusive max-scan from the left and min-scan from the right over the threads.
    for (u32 step = 1; step < TILE_THREADS; step <<= 1) {
        long long a = (t >= step) ? sstart[t - step] : -1;
        long long c = (t + step < TILE_THREADS) ? send[t + step] : 0x7fffffffffffffffLL;
        __syncthreads();
        sstart[t] = max(sstart[t], a);
        send[t] = min(send[t], c);
        __syncthreads();
    }
    long long start = (t > 0) ? sstart[t - 1] : -1;
    if (start < 0) start = open_start[(u64)b * tiles + tile];
    long long tile_end = open_end[(u64)b * tiles + tile];
    long long after = (t + 1 < TILE_THREADS) ? send[t + 1] : 0x7fffffffffffffffLL;
    long long end_after = min(after, tile_end);
    u64 s_lo = 0, s_hi = 0, e_lo = 0, e_hi = 0, j_lo = 0, j_hi = 0;
    // Starts: forward.
    u32 count = 0;
    for (u32 it = 0; it < TILE_ITEMS; ++it) {
        u64 p = first + it;
        if (p >= m) break;
        count = it + 1;
        if (p == 0 || seg[p] != seg[p - 1]) start = (long long)p;
        u64 q2 = q[p];
        u64 j = p - (u64)start;
        add128(s_lo, s_hi, (u64)start * q2);
        add128(j_lo, j_hi, j * (j + 1));
    }
    // Ends: backward.
    long long end = end_after;
    for (u32 it = count; it-- > 0;) {
        u64 p = first + it;
        if (p + 1 == m || seg[p] != seg[p + 1]) end = (long long)p + 1;
        add128(e_lo, e_hi, (u64)end * (u64)q[p]);
    }
    acc[0][t] = s_lo; acc[1][t] = s_hi;
    acc[2][t] = e_lo; acc[3][t] = e_hi;
    acc[4][t] = j_lo; acc[5][t] = j_hi;
    __syncthreads();
    for (u32 step = TILE_THREADS / 2; step > 0; step >>= 1) {
        if (t < step) {
            for (u32 w = 0; w < 6; w += 2) {
                u64 lo = acc[w][t], hi = acc[w + 1][t] + acc[w + 1][t + step];
                add128(lo, hi, acc[w][t + step]);
                acc[w][t] = lo;
                acc[w + 1][t] = hi;
            }
        }
        __syncthreads();
    }
    if (t < 6) out[((u64)b * tiles + tile) * 6 + t] = acc[t][0];
}

}
