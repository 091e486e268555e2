/* Everything a frontend or an embedding program needs. */
#pragma once

#include "osprey/clock.h"
#include "osprey/datatype.h"
#include "osprey/device.h"
#include "osprey/error.h"
#include "osprey/infer.h"
#include "osprey/log.h"
#include "osprey/memory.h"
#include "osprey/model_config.h"
#include "osprey/server.h"
#include "osprey/tensor.h"
#include "osprey/trace.h"
