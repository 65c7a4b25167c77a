// <cuda_pipeline_primitives.h>: the C-style pipeline primitives (cuda_pipeline.h).
#pragma once
#include "cuda_pipeline.h"
