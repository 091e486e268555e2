/*
 * ThreadSanitizer annotations for the hand-offs that gRPC core makes.
 *
 * Debian's gRPC core and abseil archives are not built with TSan, and
 * absl::Mutex waits on futexes TSan does not see: a tag given to
 * grpc_call_start_batch or grpc_server_request_call on one thread comes
 * back from grpc_completion_queue_next on another, and a slice's free
 * callback runs on gRPC's executor, with no happens-before TSan knows of.
 * KGRPC_HANDOFF(p) marks p as handed to gRPC (a release) and
 * KGRPC_RECEIVED(p) its return (an acquire), so that TSan still checks our
 * own accesses on each side. Both are empty outside a TSan build.
 */
#pragma once

#if defined(__SANITIZE_THREAD__)
#define KGRPC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KGRPC_TSAN 1
#endif
#endif

#ifdef KGRPC_TSAN
#include <sanitizer/tsan_interface.h>
#define KGRPC_HANDOFF(p) __tsan_release((void *)(p))
#define KGRPC_RECEIVED(p) __tsan_acquire((void *)(p))
#else
#define KGRPC_HANDOFF(p) ((void)(p))
#define KGRPC_RECEIVED(p) ((void)(p))
#endif
