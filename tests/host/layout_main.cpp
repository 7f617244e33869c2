// arena_row and source_row (hipsrc/kosmos/moe/layout.h) on the host. stdin: int32 P, E, e_loc,
// counts[P][E]. stdout: int32 arena_row[E][P], then source_row[E][P].
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
  return 0;
}
