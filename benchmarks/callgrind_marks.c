/* Callgrind client requests for benchmarks/decode_overhead.py's batch64 contestant, through ctypes:
   a part dumped before each llama_decode, and no instrumentation inside it (a step of 64 sequences
   then runs at valgrind's plain speed, minutes faster than under callgrind's counters). */
#include <valgrind/callgrind.h>

void mark_before_decode(void) {
    CALLGRIND_DUMP_STATS_AT("before-decode");
    CALLGRIND_STOP_INSTRUMENTATION;
}

void mark_after_decode(void) { CALLGRIND_START_INSTRUMENTATION; }
