// The work split both linear kernels share: y[M,N] in tiles of (a group of x rows) x (a chunk of W rows).
//
// x rows go in near-equal groups of at most 8 (the tile heights the kernels have), W rows in chunks of
// kChunk split evenly over the threads. A tile computes each of its outputs on its own (see the kernels),
// so neither the grouping nor the thread that runs a tile changes a bit of any row.

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace cos_tiles {

constexpr int64_t kChunk = 48;  // W rows per work unit: a multiple of every tile width (16, 12, 8, 6, 4, 3)

// strip(group_rows, m0, n_begin, n_end) computes the outputs of x rows [m0, m0 + group_rows) for W
// rows [n_begin, n_end).
template <class Strip>
void for_each_tile(int64_t M, int64_t N, const Strip& strip) {
  const int64_t groups = (M + 7) / 8;
  std::vector<std::pair<int64_t, int>> mgroups;
  for (int64_t g = 0, m0 = 0; g < groups; ++g) {
    const int mb = static_cast<int>((M - m0) / (groups - g));
    mgroups.emplace_back(m0, mb);
    m0 += mb;
  }
  const int64_t chunks = (N + kChunk - 1) / kChunk;
  const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), chunks)));
  auto work = [&](int t) {
    for (int64_t c = chunks * t / nt; c < chunks * (t + 1) / nt; ++c) {
      const int64_t n_begin = c * kChunk, n_end = std::min(N, n_begin + kChunk);
      for (const auto& g : mgroups) strip(g.second, g.first, n_begin, n_end);
    }
  };
  if (nt == 1) {
    work(0);
    return;
  }
#pragma omp parallel num_threads(nt)
  work(omp_get_thread_num());
}

}  // namespace cos_tiles
