// arena_row and source_row (hipsrc/kosmos/moe/layout.h) on the host. stdin: int32 P, E, e_loc,
// counts[P][E]. stdout: int32 arena_row[E][P], then source_row[E][P], then for each rank me
// own_output_row (on own_runs' table) of every row of me's dispatch order (sum_g counts[me][g] of them), me in order.
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
  for (int me = 0; me < P; ++me) {
    std::vector<int> table(size_t(3) * L), own;
    own_runs(counts.data(), P, E, L, me, table.data());
    int rows = 0;
    for (int g = 0; g < E; ++g) rows += counts[size_t(me) * E + g];
    for (int r = 0; r < rows; ++r) own.push_back(own_output_row(table.data(), L, r));
    fwrite(own.data(), 4, own.size(), stdout);
  }
  return 0;
}
