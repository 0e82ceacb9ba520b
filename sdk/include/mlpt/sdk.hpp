// Everything a C++ plugin needs: include this one header.
#pragma once

#include "mlpt/sdk/engine.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/harness.hpp"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/reward.hpp"
#include "mlpt/sdk/sandbox.hpp"
#include "mlpt/sdk/trainer.hpp"
#include "mlpt/sdk/transport.hpp"
#include "mlpt/sdk/types.hpp"
