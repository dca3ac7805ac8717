// The I/O shell: the DEALER to the scheduler, the heartbeat and death timers, and the runner threads,
// around the WorkerCore that decides (PROTOCOL.md §14, "Worker").
#pragma once

#include <csignal>

#include "options.hpp"

namespace scaler_native {

// Set by SIGINT/SIGTERM: the agent leaves (disconnect) at its next turn.
extern volatile std::sig_atomic_t stop_requested;

// Serves until told to leave; returns the process's exit status: 1 if no scheduler ever welcomed it.
int run_agent(const Options& options);

}  // namespace scaler_native
