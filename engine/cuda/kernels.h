#pragma once

// Every CUDA twin of engine/cpu/'s kernels, for QUARTET_DISPATCH (engine/dispatch.h).
#include "engine/cuda/activation.h"
#include "engine/cuda/broadcast.h"
#include "engine/cuda/concat.h"
#include "engine/cuda/conv.h"
#include "engine/cuda/dense.h"
#include "engine/cuda/elementwise.h"
#include "engine/cuda/loss.h"
#include "engine/cuda/moe.h"
#include "engine/cuda/norm.h"
#include "engine/cuda/optim.h"
#include "engine/cuda/pool.h"
#include "engine/cuda/transformer.h"
#include "engine/cuda/upsample.h"
