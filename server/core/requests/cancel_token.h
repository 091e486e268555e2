/* What the schedulers ask of the cancellation tokens (osprey/server.h). */
#ifndef OSPREY_CANCEL_TOKEN_H
#define OSPREY_CANCEL_TOKEN_H

#include <stdint.h>

/* How many tokens were ever cancelled, in this process. A scheduler that
 * saw the same count at its last look at its queue has no newly cancelled
 * request to drop from it, and skips walking the queue. */
uint64_t cancel_token_epoch(void);

#endif
