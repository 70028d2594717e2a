#include "dist/checkpoint.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "dist/digest.h"

namespace headroom::dist {

namespace {
constexpr std::string_view kCheckpointMagic = "headroom-diloco-checkpoint 1\n";
}

Status WriteCheckpoint(const std::string& path, const Checkpoint& c) {
  nlohmann::json head = {{"model", c.model},
                         {"parameters", c.parameters.size()},
                         {"sha256", Hex(Sha256Floats(c.parameters))},
                         {"round", c.round},
                         {"tokens", c.tokens}};
  std::string out(kCheckpointMagic);
  out += head.dump();
  out += '\n';
  const std::size_t at = out.size();
  out.resize(at + 4 * c.parameters.size());
  std::memcpy(out.data() + at, c.parameters.data(), 4 * c.parameters.size());
  return WriteFileAtomically(path, out);
}

Result<Checkpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error::Input(path + ": cannot open");
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (!data.starts_with(kCheckpointMagic))
    return Error::Input(path + ":1: not a headroom-diloco checkpoint");
  const auto eol = data.find('\n', kCheckpointMagic.size());
  if (eol == std::string::npos) return Error::Input(path + ":2: no header line");
  auto head = nlohmann::json::parse(
      data.substr(kCheckpointMagic.size(), eol - kCheckpointMagic.size()), nullptr, false);
  if (head.is_discarded() || !head.is_object())
    return Error::Input(path + ":2: header is not JSON");
  for (const char* field : {"model", "parameters", "sha256", "round", "tokens"}) {
    if (!head.contains(field)) {
      return Error::Input(path + ":2: field '" + field + "': missing");
    }
  }
  if (!head["parameters"].is_number_unsigned() || !head["model"].is_string() ||
      !head["sha256"].is_string()) {
    return Error::Input(path + ":2: field 'parameters', 'model' or 'sha256': wrong type");
  }
  Checkpoint c;
  c.model = head["model"].get<std::string>();
  c.round = head["round"].get<int>();
  c.tokens = head["tokens"].get<std::uint64_t>();
  const std::size_t n = head["parameters"].get<std::size_t>();
  const std::size_t body = data.size() - eol - 1;
  if (body != 4 * n) {
    return Error::Input(path + ": " + std::to_string(body) + " bytes of parameters, expected " +
                        std::to_string(4 * n));
  }
  c.parameters.resize(n);
  std::memcpy(c.parameters.data(), data.data() + eol + 1, body);
  if (Hex(Sha256Floats(c.parameters)) != head["sha256"].get<std::string>()) {
    return Error::Input(path + ":2: field 'sha256': the parameters do not hash to it");
  }
  return c;
}

}  // namespace headroom::dist
