// A command of a program: what runs once its options are parsed (cli/commands.h registers
// `headroom`'s, diloco_cli/diloco_args.h headroom-diloco's).
#pragma once

#include <functional>

#include "common/error.h"

namespace headroom::cli {

using Command = std::function<Status()>;

}  // namespace headroom::cli
