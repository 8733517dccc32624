/* isa.h — which instruction set generated code and the runtime kernels are built for. By
 * default the best the CPU offers (-march=native); DLCC_ISA (or dl_compile_options.isa) forces
 * "avx512", "avx2" or "generic", so every kernel path can be tested on one machine. */
#ifndef DL_ISA_H
#define DL_ISA_H

#include "../core/core-impl.h"

typedef struct dl_isa {
    char name[16];    /* "avx512", "avx2", "generic" (the path the kernels take) */
    char cflags[96];  /* compiler flags selecting it */
    int vector_bytes; /* widest float vector the schedules should use */
} dl_isa;

/* req NULL or "": $DLCC_ISA, else "native". Fails for an unknown name or a set the CPU lacks. */
dl_status dl_isa_resolve(dl_ctx *ctx, const char *req, dl_isa *out);

#endif
