// Standalone mover collectives: all-gather (pull), reduce-scatter (one-shot pull), all-to-all
// (push). They are the paper's unfused communication kernels and the mover half of the fused
// ones. Persistent grid: every CTA claims work items from the op's queue until it is empty.
#include "kosmos/mover.h"
#include "kosmos/protocol.h"
#include "kosmos/sentinel.h"
#include "kosmos/wait.h"

using namespace kosmos;

// ---------------------------------------------------------------------------------------
// All-gather. out[p * shard_bytes ...] = shard of rank p. Each rank stages its shard in the
// heap; movers pull items of `item_bytes` (256-row tile rows in the fused kernels) from every
// peer, destination-minor: consecutive items hit different peers.
extern "C" __global__ void kosmos_all_gather(const u64* __restrict__ peer_bases, int rank, int world,
                                             u64 epoch, u64 flags_off, u64 staging_off,
                                             const u8* __restrict__ x, u8* __restrict__ out,
                                             u64 shard_bytes, u64 item_bytes, WaitCtx wait) {
  __shared__ u64 s_item;
  __shared__ int s_ok;
  OpFlags* mine = flags_of(peer_bases, rank, flags_off);
  u8* my_out = out + u64(rank) * shard_bytes;
  if (world == 1) {
    grid_copy(my_out, x, shard_bytes);
    return;
  }
  if (!wait_peers_done(wait, mine, rank, world, epoch)) return;
  grid_copy(reinterpret_cast<u8*>(peer_bases[rank] + staging_off), x, shard_bytes);
  grid_copy(my_out, x, shard_bytes);
  __syncthreads();
  if (threadIdx.x == 0 && arrive_last(&mine->staged, epoch, gridDim.x))
    signal_peers(peer_bases, flags_off, rank, world, epoch, /*ready=*/true);

  const u64 per_peer = (shard_bytes + item_bytes - 1) / item_bytes;
  const u64 n_items = per_peer * (world - 1), base = queue_base(epoch, n_items);
  for (;;) {
    const u64 idx = cta_broadcast(&s_item, threadIdx.x == 0 ? atomic_add_relaxed_dev(&mine->head, 1) - base : 0);
    if (idx >= n_items) break;
    const int peer = (rank + 1 + int(idx % (world - 1))) % world;
    const u64 off = (idx / (world - 1)) * item_bytes;
    const u64 len = off + item_bytes > shard_bytes ? shard_bytes - off : item_bytes;
    int ok = threadIdx.x == 0 ? wait_flag_sys(wait, SITE_PEER_READY, &mine->ready[peer], epoch) : 1;
    if (!cta_broadcast(&s_ok, ok)) return;
    cta_copy(out + u64(peer) * shard_bytes + off,
             reinterpret_cast<const u8*>(peer_bases[peer] + staging_off) + off, len, blockDim.x);
    __syncthreads();
    if (threadIdx.x == 0 && arrive_last(&mine->items[peer], epoch, per_peer))
      st_release_sys(&flags_of(peer_bases, peer, flags_off)->done[rank], epoch);
  }
}

// ---------------------------------------------------------------------------------------
// Reduce-scatter, one-shot pull. Every rank stages its full input (world chunks) in one of two
// staging buffers (by epoch parity) and poisons the other with a signalling-NaN sentinel for
// the next call; reducers pull this rank's chunk from every rank, detect arrival from the data
// itself (no sentinel left), sum in fp32 in rank order 0..world-1 and round once.
template <class T>
KOSMOS_DEVICE void reduce_scatter(const u64* __restrict__ peer_bases, int rank, int world, u64 epoch,
                                  u64 flags_off, u64 staging_off, const T* __restrict__ x,
                                  T* __restrict__ out, u64 chunk_bytes, u64 item_bytes, WaitCtx wait) {
  __shared__ u64 s_item;
  __shared__ int s_ok;
  typedef Sentinel<T> S;
  OpFlags* mine = flags_of(peer_bases, rank, flags_off);
  const u64 total = chunk_bytes * world;
  // Buffers by parity: call e writes buffer e % 2 and poisons the other.
  const Staging st{peer_bases, staging_off, total, chunk_bytes / sizeof(T), 1};
  const u64 cur_off = st.cur(epoch);
  if (!wait_peers_done(wait, mine, rank, world, epoch)) return;
  poison_and_stage<T>(st, rank, epoch, reinterpret_cast<const vec16*>(x));

  const u64 n_items = (chunk_bytes + item_bytes - 1) / item_bytes, base = queue_base(epoch, n_items);
  bool ok = true;
  for (;;) {
    const u64 idx = cta_broadcast(&s_item, threadIdx.x == 0 ? atomic_add_relaxed_dev(&mine->head, 1) - base : 0);
    if (idx >= n_items) break;
    const u64 off = idx * item_bytes;
    const u64 len = off + item_bytes > chunk_bytes ? chunk_bytes - off : item_bytes;
    const u64 src_off = cur_off + u64(rank) * chunk_bytes + off;
    for (u64 v = threadIdx.x; ok && v < len / 16; v += blockDim.x) {
      float acc[S::kLanes];
#pragma unroll
      for (int l = 0; l < S::kLanes; ++l) acc[l] = 0.f;
      for (int p = 0; p < world && ok; ++p) {
        const vec16* src = reinterpret_cast<const vec16*>(peer_bases[p] + src_off) + v;
        vec16 d = ld16_volatile(src);
        if (S::has(d)) ok = bounded_wait(wait, SITE_SENTINEL, [&] { d = ld16_volatile(src); return !S::has(d); });
#pragma unroll
        for (int l = 0; l < S::kLanes; ++l) acc[l] += S::lane(d, l);
      }
      if (ok) st16(reinterpret_cast<vec16*>(reinterpret_cast<u8*>(out) + off) + v, S::pack(acc));
    }
    if (!cta_broadcast(&s_ok, threadIdx.x == 0 ? int(still_ok(wait, SITE_SENTINEL)) : 0)) return;
  }
  __syncthreads();
  if (threadIdx.x == 0 && arrive_last(&mine->exited, epoch, gridDim.x))
    signal_peers(peer_bases, flags_off, rank, world, epoch, /*ready=*/false);
}

#define KOSMOS_RS(NAME, T)                                                                          \
  extern "C" __global__ void NAME(const u64* __restrict__ peer_bases, int rank, int world, u64 epoch, \
                                  u64 flags_off, u64 staging_off, const T* __restrict__ x,           \
                                  T* __restrict__ out, u64 chunk_bytes, u64 item_bytes, WaitCtx wait) { \
    reduce_scatter<T>(peer_bases, rank, world, epoch, flags_off, staging_off, x, out, chunk_bytes,    \
                      item_bytes, wait);                                                             \
  }
KOSMOS_RS(kosmos_reduce_scatter_bf16, u16)
KOSMOS_RS(kosmos_reduce_scatter_f32, float)

// ---------------------------------------------------------------------------------------
// All-to-all with per-destination row counts, push. plan (i64[3 * world]): for destination d,
// [d] = rows to send, [world + d] = first row in x, [2 * world + d] = first row in d's arena.
// Rows from source s land in the destination's arena after those of sources < s, so the
// arena, copied out, is the output. Items are (destination, chunk of item_rows rows),
// destination-minor; a capacity-sized item list keeps the per-call item count fixed.
extern "C" __global__ void kosmos_all_to_all(const u64* __restrict__ peer_bases, int rank, int world,
                                             u64 epoch, u64 flags_off, u64 arena_off,
                                             const u8* __restrict__ x, u8* __restrict__ out,
                                             const i64* __restrict__ plan, u64 row_bytes, u64 recv_rows,
                                             u64 chunks_per_dest, u64 item_rows, WaitCtx wait) {
  __shared__ u64 s_item;
  __shared__ int s_ok;
  OpFlags* mine = flags_of(peer_bases, rank, flags_off);
  const u64 n_items = chunks_per_dest * world, base = queue_base(epoch, n_items);
  for (;;) {
    const u64 idx = cta_broadcast(&s_item, threadIdx.x == 0 ? atomic_add_relaxed_dev(&mine->head, 1) - base : 0);
    if (idx >= n_items) break;
    const int dest = (rank + int(idx % world)) % world;
    const u64 row0 = (idx / world) * item_rows, count = u64(plan[dest]);
    if (row0 < count) {
      // The destination must have copied its arena out from the last call before we overwrite it.
      int ok = (threadIdx.x == 0 && dest != rank) ? wait_flag_sys(wait, SITE_ARENA_FREE, &mine->done[dest], epoch - 1) : 1;
      if (!cta_broadcast(&s_ok, ok)) return;
      const u64 rows = row0 + item_rows > count ? count - row0 : item_rows;
      cta_copy(reinterpret_cast<u8*>(peer_bases[dest] + arena_off) + (u64(plan[2 * world + dest]) + row0) * row_bytes,
               x + (u64(plan[world + dest]) + row0) * row_bytes, rows * row_bytes, blockDim.x);
    }
    __syncthreads();
    if (threadIdx.x == 0 && arrive_last(&mine->items[dest], epoch, chunks_per_dest))
      st_release_sys(&flags_of(peer_bases, dest, flags_off)->ready[rank], epoch);
  }
  // Copy-out, once every source (this rank included) has pushed all its rows to us.
  int ok = 1;
  if (threadIdx.x == 0)
    for (int p = 0; p < world && ok; ++p) ok = wait_flag_sys(wait, SITE_PEER_ARRIVED, &mine->ready[p], epoch);
  if (!cta_broadcast(&s_ok, ok)) return;
  grid_copy(out, reinterpret_cast<const u8*>(peer_bases[rank] + arena_off), recv_rows * row_bytes);
  __syncthreads();
  if (threadIdx.x == 0 && arrive_last(&mine->exited, epoch, gridDim.x))
    signal_peers(peer_bases, flags_off, rank, world, epoch, /*ready=*/false);
}

// ---------------------------------------------------------------------------------------
// The mover loop alone, between local buffers: bytes per SM per second (bench/collectives.py).
extern "C" __global__ void kosmos_mover_copy(u64* __restrict__ head, u8* __restrict__ dst,
                                             const u8* __restrict__ src, u64 nbytes, u64 item_bytes,
                                             u64 epoch) {
  __shared__ u64 s_item;
  const u64 n_items = (nbytes + item_bytes - 1) / item_bytes, base = queue_base(epoch, n_items);
  for (;;) {
    const u64 idx = cta_broadcast(&s_item, threadIdx.x == 0 ? atomic_add_relaxed_dev(head, 1) - base : 0);
    if (idx >= n_items) break;
    const u64 off = idx * item_bytes;
    cta_copy(dst + off, src + off, off + item_bytes > nbytes ? nbytes - off : item_bytes, blockDim.x);
  }
}

// A wait nobody will ever satisfy: the timeout test's probe.
extern "C" __global__ void kosmos_wait_probe(const u64* __restrict__ flag, u64 target, WaitCtx wait) {
  if (threadIdx.x == 0) wait_flag_sys(wait, SITE_PROBE, flag, target);
}
