/* dtype.c — element types: names, sizes, half-precision conversion, and dtype-generic element
 * access for the reference kernels. */
#include "core-impl.h"

#include <math.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[DL_DTYPE_COUNT] = {
    [DL_DTYPE_UNDEFINED] = {"undefined", 0},
    [DL_F32] = {"float32", 4},
    [DL_F64] = {"float64", 8},
    [DL_F16] = {"float16", 2},
    [DL_BF16] = {"bfloat16", 2},
    [DL_I8] = {"int8", 1},
    [DL_U8] = {"uint8", 1},
    [DL_I16] = {"int16", 2},
    [DL_U16] = {"uint16", 2},
    [DL_I32] = {"int32", 4},
    [DL_U32] = {"uint32", 4},
    [DL_I64] = {"int64", 8},
    [DL_U64] = {"uint64", 8},
    [DL_BOOL] = {"bool", 1},
};
_Static_assert(DL_ARRAY_LEN(dtype_info) == DL_DTYPE_COUNT, "one info row per dtype");

const char *dl_dtype_name(dl_dtype t) {
    if ((unsigned)t >= DL_DTYPE_COUNT) return "invalid";
    return dtype_info[t].name;
}

size_t dl_dtype_size(dl_dtype t) {
    if ((unsigned)t >= DL_DTYPE_COUNT) return 0;
    return dtype_info[t].size;
}

dl_dtype dl_dtype_from_name(const char *name) {
    for (int t = 1; t < DL_DTYPE_COUNT; t++)
        if (strcmp(name, dtype_info[t].name) == 0) return (dl_dtype)t;
    return DL_DTYPE_UNDEFINED;
}

/* ONNX TensorProto.DataType codes. Ops (Cast, EyeLike, windows...) take them as attributes and
 * the ONNX reader as tensor types, so the one table lives here. */
static const struct {
    dl_dtype dtype;
    const char *name;
} onnx_types[] = {
    [0] = {DL_DTYPE_UNDEFINED, "undefined"},
    [1] = {DL_F32, "float"},
    [2] = {DL_U8, "uint8"},
    [3] = {DL_I8, "int8"},
    [4] = {DL_U16, "uint16"},
    [5] = {DL_I16, "int16"},
    [6] = {DL_I32, "int32"},
    [7] = {DL_I64, "int64"},
    [8] = {DL_DTYPE_UNDEFINED, "string"},
    [9] = {DL_BOOL, "bool"},
    [10] = {DL_F16, "float16"},
    [11] = {DL_F64, "double"},
    [12] = {DL_U32, "uint32"},
    [13] = {DL_U64, "uint64"},
    [14] = {DL_DTYPE_UNDEFINED, "complex64"},
    [15] = {DL_DTYPE_UNDEFINED, "complex128"},
    [16] = {DL_BF16, "bfloat16"},
    [17] = {DL_DTYPE_UNDEFINED, "float8e4m3fn"},
    [18] = {DL_DTYPE_UNDEFINED, "float8e4m3fnuz"},
    [19] = {DL_DTYPE_UNDEFINED, "float8e5m2"},
    [20] = {DL_DTYPE_UNDEFINED, "float8e5m2fnuz"},
    [21] = {DL_DTYPE_UNDEFINED, "uint4"},
    [22] = {DL_DTYPE_UNDEFINED, "int4"},
};

dl_dtype dl_dtype_from_onnx(int64_t code) {
    if (code < 0 || code >= (int64_t)DL_ARRAY_LEN(onnx_types)) return DL_DTYPE_UNDEFINED;
    return onnx_types[code].dtype;
}

int64_t dl_dtype_to_onnx(dl_dtype t) {
    for (size_t i = 0; i < DL_ARRAY_LEN(onnx_types); i++)
        if (onnx_types[i].dtype == t && t != DL_DTYPE_UNDEFINED) return (int64_t)i;
    return 0;
}

const char *dl_onnx_type_name(int64_t code) {
    if (code < 0 || code >= (int64_t)DL_ARRAY_LEN(onnx_types)) return "unknown";
    return onnx_types[code].name;
}

bool dl_dtype_is_float(dl_dtype t) {
    return t == DL_F32 || t == DL_F64 || t == DL_F16 || t == DL_BF16;
}

bool dl_dtype_is_int(dl_dtype t) {
    return t == DL_I8 || t == DL_U8 || t == DL_I16 || t == DL_U16 || t == DL_I32 || t == DL_U32 ||
           t == DL_I64 || t == DL_U64;
}

bool dl_dtype_is_signed(dl_dtype t) {
    return t == DL_I8 || t == DL_I16 || t == DL_I32 || t == DL_I64 || dl_dtype_is_float(t);
}

/* IEEE half <-> single, round to nearest even, with subnormals, inf and NaN. */
float dl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: value = man * 2^-24 */
            float v = (float)man * 5.9604644775390625e-8f;
            return sign ? -v : v;
        }
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t dl_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
    if (absx >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
    if (absx < 0x38800000u) {                      /* below the smallest normal half */
        float a;
        memcpy(&a, &absx, 4);
        /* subnormal halves are multiples of 2^-24; nearbyint rounds half to even */
        return sign | (uint16_t)nearbyintf(a * 16777216.0f);
    }
    uint32_t mant_odd = (absx >> 13) & 1;
    absx += 0xfffu + mant_odd; /* round to nearest even on the 13 dropped bits */
    return sign | (uint16_t)(((absx >> 23) - 112) << 10 | ((absx >> 13) & 0x3ff));
}

float dl_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t dl_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

double dl_get_f64(const dl_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case DL_F32:
        return ((const float *)p)[i];
    case DL_F64:
        return ((const double *)p)[i];
    case DL_F16:
        return dl_f16_to_f32(((const uint16_t *)p)[i]);
    case DL_BF16:
        return dl_bf16_to_f32(((const uint16_t *)p)[i]);
    case DL_I8:
        return ((const int8_t *)p)[i];
    case DL_U8:
        return ((const uint8_t *)p)[i];
    case DL_I16:
        return ((const int16_t *)p)[i];
    case DL_U16:
        return ((const uint16_t *)p)[i];
    case DL_I32:
        return ((const int32_t *)p)[i];
    case DL_U32:
        return ((const uint32_t *)p)[i];
    case DL_I64:
        return (double)((const int64_t *)p)[i];
    case DL_U64:
        return (double)((const uint64_t *)p)[i];
    case DL_BOOL:
        return ((const uint8_t *)p)[i] != 0;
    default:
        return 0;
    }
}

/* float -> integer conversion that never hits C's undefined behaviour: NaN gives 0 and
 * out-of-range values saturate. */
static int64_t f64_to_i64(double v) {
    if (isnan(v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

static uint64_t f64_to_u64(double v) {
    if (isnan(v) || v <= 0) return (uint64_t)f64_to_i64(v);
    if (v >= 18446744073709551615.0) return UINT64_MAX;
    return (uint64_t)v;
}

void dl_set_f64(dl_tensor *t, int64_t i, double v) {
    void *p = t->data;
    switch (t->dtype) {
    case DL_F32:
        ((float *)p)[i] = (float)v;
        break;
    case DL_F64:
        ((double *)p)[i] = v;
        break;
    case DL_F16:
        ((uint16_t *)p)[i] = dl_f32_to_f16((float)v);
        break;
    case DL_BF16:
        ((uint16_t *)p)[i] = dl_f32_to_bf16((float)v);
        break;
    case DL_U64:
        ((uint64_t *)p)[i] = f64_to_u64(v);
        break;
    case DL_BOOL:
        ((uint8_t *)p)[i] = v != 0;
        break;
    default:
        dl_set_i64(t, i, f64_to_i64(v));
        break;
    }
}

int64_t dl_get_i64(const dl_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case DL_I8:
        return ((const int8_t *)p)[i];
    case DL_U8:
        return ((const uint8_t *)p)[i];
    case DL_I16:
        return ((const int16_t *)p)[i];
    case DL_U16:
        return ((const uint16_t *)p)[i];
    case DL_I32:
        return ((const int32_t *)p)[i];
    case DL_U32:
        return ((const uint32_t *)p)[i];
    case DL_I64:
        return ((const int64_t *)p)[i];
    case DL_U64:
        return (int64_t)((const uint64_t *)p)[i];
    case DL_BOOL:
        return ((const uint8_t *)p)[i] != 0;
    default:
        return f64_to_i64(dl_get_f64(t, i));
    }
}

void dl_set_i64(dl_tensor *t, int64_t i, int64_t v) {
    void *p = t->data;
    switch (t->dtype) {
    case DL_I8:
        ((int8_t *)p)[i] = (int8_t)v;
        break;
    case DL_U8:
        ((uint8_t *)p)[i] = (uint8_t)v;
        break;
    case DL_I16:
        ((int16_t *)p)[i] = (int16_t)v;
        break;
    case DL_U16:
        ((uint16_t *)p)[i] = (uint16_t)v;
        break;
    case DL_I32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    case DL_U32:
        ((uint32_t *)p)[i] = (uint32_t)v;
        break;
    case DL_I64:
        ((int64_t *)p)[i] = v;
        break;
    case DL_U64:
        ((uint64_t *)p)[i] = (uint64_t)v;
        break;
    case DL_BOOL:
        ((uint8_t *)p)[i] = v != 0;
        break;
    default:
        dl_set_f64(t, i, (double)v);
        break;
    }
}
