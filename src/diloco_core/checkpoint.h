#pragma once
// A model checkpoint of `headroom diloco`: the line "headroom-diloco-checkpoint 1", one line of
// JSON ({"model", "parameters", "sha256", "round", "tokens"}), then the parameters as
// little-endian float32. Written atomically (a temporary file renamed).
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace headroom::diloco {

struct Checkpoint {
  std::string model;
  int round = 0;
  std::uint64_t tokens = 0;
  std::vector<float> parameters;
};

// The most parameters a checkpoint may hold (4 GiB of float32).
inline constexpr std::uint64_t kMaxCheckpointParameters = std::uint64_t{1} << 30;

Status WriteCheckpoint(const std::string& path, const Checkpoint& c);
// An input error naming the file and what is wrong: not a regular file, the header (each
// field's type and range), the size, the hash, a parameter that is not a finite number. The
// parameters are read only once the header and the file's size agree.
Result<Checkpoint> ReadCheckpoint(const std::string& path);

}  // namespace headroom::diloco
