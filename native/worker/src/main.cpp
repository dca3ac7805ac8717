// scaler_native_worker: a Scaler worker in C++, written from scaler/protocol/PROTOCOL.md alone.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "agent.hpp"
#include "logging.hpp"
#include "options.hpp"
#include "protocol.hpp"

namespace {

void on_signal(int) { scaler_native::stop_requested = 1; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> arguments(argv + 1, argv + argc);
  for (const std::string& argument : arguments) {
    if (argument == "--version") {  // as the Python commands print it: what an operator compares before an upgrade
      std::printf("%s, protocol version %u, revision %u\n", scaler_native::kRelease, scaler_native::kProtocolVersion,
                  scaler_native::kProtocolRevision);
      return 0;
    }
  }
  std::string error;
  std::optional<scaler_native::Options> options = scaler_native::parse_options(arguments, error);
  if (!options) {
    if (error.empty()) {
      std::fputs(scaler_native::usage().c_str(), stdout);
      return 0;
    }
    std::fprintf(stderr, "%sscaler_native_worker: error: %s\n", scaler_native::usage().c_str(), error.c_str());
    return 2;
  }
  scaler_native::set_log_level(options->logging_level);
  // No SA_RESTART: the signal interrupts the agent's poll, so it leaves at once.
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return scaler_native::run_agent(*options);
}
