#include "rl_train/kernels.h"

#include <cstdlib>
#include <cstring>

namespace headroom::rl::kernels {

#ifdef HEADROOM_X86_KERNELS
// kernels_avx2.cc and kernels_avx512.cc: call only where the CPU has what they were built for.
const Set& Avx2Unchecked();
const Set& Avx512Unchecked();

const Set* Avx2() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported ? &Avx2Unchecked() : nullptr;
}

const Set* Avx512() {
  static const bool supported = Avx2() != nullptr && __builtin_cpu_supports("avx512f");
  return supported ? &Avx512Unchecked() : nullptr;
}
#else
const Set* Avx2() { return nullptr; }  // not an x86-64 build
const Set* Avx512() { return nullptr; }
#endif

std::vector<const Set*> Available() {
  std::vector<const Set*> sets{&Portable()};
  if (Avx2() != nullptr) sets.push_back(Avx2());
  if (Avx512() != nullptr) sets.push_back(Avx512());
  return sets;
}

const Set& Best() {
  static const Set* best = [] {
    const char* cap = std::getenv("HEADROOM_KERNELS");
    const std::vector<const Set*> sets = Available();
    const Set* pick = sets.back();
    if (cap != nullptr) {
      for (const Set* s : sets) {
        if (std::strcmp(cap, s->name) == 0) pick = s;
      }
    }
    return pick;
  }();
  return *best;
}

}  // namespace headroom::rl::kernels
