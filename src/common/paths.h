// Where outputs land, and outputs that would land on an input.
//
// A command that writes files checks, before it writes anything, that no output is one of its
// inputs: `analyze X --report X` would replace the trace with its own report. The same file is
// recognised through symlinks and hard links (st_dev/st_ino), and an output that does not exist
// yet by its resolved path (a dangling link to an input's name).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace headroom {

// The file a write to `path` lands on: symlinks followed (also a dangling one's target); `path`
// itself when it is not a link. A relative link target counts from the link's directory. Fails
// with an Io error on a loop of links (more than 40) or an unreadable link.
Result<std::string> ResolveOutputPath(const std::string& path);

// How an output is written (docs/AGENT.md, "Outputs"). A new path, or a regular file, is
// replaced whole (through a temporary file beside it, or rotated away for a trace); /dev/null,
// and /dev/stdout or /dev/stderr (whatever they name: a pipe, a terminal), are written in place;
// anything else that exists -- a directory, a device, a FIFO, a socket -- is refused: an output
// never replaces or moves what is not a regular file (as root, a report to /dev/null must not
// replace the system's /dev/null with a file).
enum class OutputKind { kFile, kInPlace };
// Links followed (ResolveOutputPath); an Io error "PATH: is a directory, not a regular file
// (outputs go to regular files, new paths, /dev/null or /dev/stdout)" for the refused ones.
Result<OutputKind> CheckOutputPath(const std::string& path);

// Usage error "<output_flag> 'OUT' is also <input_flag> 'IN': refusing to overwrite an input"
// when `output` would write over any input (same file after following links, or same resolved
// path). Empty paths are skipped.
Status RefuseOutputOverInput(const std::string& output, std::string_view output_flag,
                             const std::vector<std::pair<std::string, std::string>>& inputs
                             /* {flag, path} */);

}  // namespace headroom
