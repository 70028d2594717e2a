// Free loopback TCP ports: the one helper for whatever starts a server of its own on a port it
// chooses (`headroom diloco local`'s etcd, the tests' etcd, Slurm and coordinators, benchmarks).
// A port is free when handed out; another process may take it before it is bound again, so a
// caller that can must retry on "address in use".
#pragma once

#include <vector>

#include "common/error.h"

namespace headroom {

// A port the kernel hands out for 127.0.0.1:0, released at once.
Result<int> FreeLoopbackPort();
// `n` ports, all bound at once (so they differ), then released.
Result<std::vector<int>> FreeLoopbackPorts(int n);

}  // namespace headroom
