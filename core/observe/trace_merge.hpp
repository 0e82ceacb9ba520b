// Other processes' timelines merged into the run's trace.json once the run has ended. Each rank of
// a distributed run writes its own part (a TraceWriter file of its own, bounded by its own cap);
// the coordinator appends every part's events to its own closed trace. A part's times are moved
// onto the trace's clock by the difference of the two files' wall-clock origins
// ("clock_origin_unix_ns" in each first event): exact between processes of one node, and as good
// as the nodes' clock synchronisation (NTP, PTP) across nodes. A part's own header events (its
// title, cap note and end marker, on pid 0) are kept on the part's group, scoped to it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

namespace mlpt::observe {

struct TraceMerge {
  int parts = 0;                                 // parts merged
  int64_t events = 0;                            // their events appended
  int64_t skipped_lines = 0;                     // lines cut short by a writer still running, or not JSON
  std::vector<std::filesystem::path> unaligned;  // parts without a clock origin, left out
};

// Where a TraceWriter's file ends with the array's closing bracket (the bracket's offset), or
// nothing while its writer is still running or after it was cut short.
std::optional<uint64_t> closing_bracket(const std::filesystem::path& trace);

// Appends every part's events to `trace` (a TraceWriter's file, closed or cut short) and closes it.
// The result is at most the trace's size plus the parts'.
TraceMerge merge_trace_parts(const std::filesystem::path& trace,
                             const std::vector<std::filesystem::path>& parts);

}  // namespace mlpt::observe
