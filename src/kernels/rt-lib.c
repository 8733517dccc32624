/* rt-lib.c — the runtime kernels (src/kernels/rt/) compiled into libdlcc as well, so the host can
 * size their scratch memory (dlrt_conv_workspace) and call them directly. Generated code gets
 * its own copy, built with the model's flags. */
#include "rt/attention.c"
#include "rt/conv-direct.c"
#include "rt/conv-grad.c"
#include "rt/conv-implicit.c"
#include "rt/conv.c"
#include "rt/copy.c"
#include "rt/depthwise-cv.c"
#include "rt/depthwise-row.c"
#include "rt/depthwise.c"
#include "rt/gather.c"
#include "rt/gemm.c"
#include "rt/pool.c"
#include "rt/softmax.c"
#include "rt/threads.c"
#include "rt/transpose.c"
#include "rt/winograd.c"
