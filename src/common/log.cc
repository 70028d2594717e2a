#include "common/log.h"

namespace headroom {

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kInfo:
      break;
  }
  return "info";
}

}  // namespace headroom
