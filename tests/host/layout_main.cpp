// arena_row and source_row (hipsrc/kosmos/moe/layout.h) on the host. stdin: int32 P, E, e_loc,
// counts[P][E]. stdout: int32 arena_row[E][P], then source_row[E][P], then for each rank me
// own_output_row of every row of me's dispatch order (sum_g counts[me][g] of them), me in order.
#include <cstdio>
#include <vector>

#include "kosmos/moe/layout.h"

using namespace kosmos::moe;

int main() {
  int h[3];
  if (fread(h, 4, 3, stdin) != 3) return 2;
  const int P = h[0], E = h[1], L = h[2];
  std::vector<int> counts(size_t(P) * E), arena(size_t(E) * P), source(size_t(E) * P);
  if (fread(counts.data(), 4, counts.size(), stdin) != counts.size()) return 2;
  for (int g = 0; g < E; ++g)
    for (int s = 0; s < P; ++s) {
      arena[size_t(g) * P + s] = arena_row(counts.data(), P, E, L, g, s);
      source[size_t(g) * P + s] = source_row(counts.data(), E, g, s);
    }
  fwrite(arena.data(), 4, arena.size(), stdout);
  fwrite(source.data(), 4, source.size(), stdout);
  for (int me = 0; me < P; ++me) {  // the combine's run tables of owner me (combine.h combine_tables)
    std::vector<int> run_base(size_t(L) * P), run_dest(size_t(L) * P), own;
    for (int v = 0; v < L * P; ++v) {
      run_base[v] = arena_row(counts.data(), P, E, L, me * L + v / P, v % P);
      run_dest[v] = source_row(counts.data(), E, me * L + v / P, v % P);
    }
    int rows = 0;
    for (int g = 0; g < E; ++g) rows += counts[size_t(me) * E + g];
    for (int r = 0; r < rows; ++r)
      own.push_back(own_output_row(counts.data(), run_base.data(), run_dest.data(), P, E, L, me, r));
    fwrite(own.data(), 4, own.size(), stdout);
  }
  return 0;
}
