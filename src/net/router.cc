#include "net/router.h"

#include <fmt/format.h>

#include <cassert>

namespace headroom::net {

Router::Router(AccessPolicy policy, std::string daemon)
    : policy_(std::move(policy)), daemon_(std::move(daemon)) {}

void Router::Add(std::string path, Access access, Fn fn) {
  assert(!path.empty() && path.front() == '/');
  for ([[maybe_unused]] const Route& r : routes_) assert(r.path != path);
  if (!paths_.empty()) paths_ += ", ";
  paths_ += path;
  routes_.push_back({std::move(path), access, std::move(fn)});
}

Response Router::Handle(const Request& request) const {
  if (auto refused = RefuseHost(policy_, request, daemon_)) return std::move(*refused);
  const std::string_view target = request.target;
  if (target.empty() || target.front() != '/') {
    return ErrorResponse(400, "target: expected an absolute path");
  }
  const size_t question = target.find('?');
  const std::string_view path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
  const Route* route = nullptr;
  for (const Route& r : routes_) {
    if (r.path == path) route = &r;
  }
  if (route == nullptr) {
    return ErrorResponse(404, fmt::format("no such path; this {} serves {}", daemon_, paths_));
  }
  if (route->access == Access::kWrite) {
    if (request.method != "POST") return MethodNotAllowed("POST");
    if (auto refused = RefuseWrite(policy_, request)) return std::move(*refused);
  } else {
    if (request.method != "GET" && request.method != "HEAD") return MethodNotAllowed("GET, HEAD");
    if (route->access == Access::kRead) {
      if (auto refused = RefuseRead(policy_, request)) return std::move(*refused);
    } else if (route->access == Access::kCostlyRead) {
      if (auto refused = RefuseCostlyRead(policy_, request)) return std::move(*refused);
    }
  }
  return route->fn(request, query);
}

}  // namespace headroom::net
