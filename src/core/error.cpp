#include "core/error.hpp"

#include <utility>

namespace hopattn {
namespace {

std::string& last_error_message() {
  thread_local std::string message;
  return message;
}

}  // namespace

Status set_error(Status status, std::string message) {
  last_error_message() = std::move(message);
  return status;
}

void clear_error() { last_error_message().clear(); }

const char* last_error() { return last_error_message().c_str(); }

}  // namespace hopattn
