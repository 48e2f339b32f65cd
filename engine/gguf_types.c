/* GGUF reader: the ggml type table, row sizes, and the names of statuses and value types. */
#include "gguf_internal.h"

/* ======================================================================================
 * ggml type table
 * ====================================================================================== */

static const gguf_type_info type_table[] = {
    {GGUF_GGML_F32, "F32", 1, 4},          {GGUF_GGML_F16, "F16", 1, 2},
    {GGUF_GGML_Q4_0, "Q4_0", 32, 18},      {GGUF_GGML_Q4_1, "Q4_1", 32, 20},
    {GGUF_GGML_Q5_0, "Q5_0", 32, 22},      {GGUF_GGML_Q5_1, "Q5_1", 32, 24},
    {GGUF_GGML_Q8_0, "Q8_0", 32, 34},      {GGUF_GGML_Q8_1, "Q8_1", 32, 40},
    {GGUF_GGML_Q2_K, "Q2_K", 256, 84},     {GGUF_GGML_Q3_K, "Q3_K", 256, 110},
    {GGUF_GGML_Q4_K, "Q4_K", 256, 144},    {GGUF_GGML_Q5_K, "Q5_K", 256, 176},
    {GGUF_GGML_Q6_K, "Q6_K", 256, 210},    {GGUF_GGML_Q8_K, "Q8_K", 256, 292},
    {GGUF_GGML_IQ2_XXS, "IQ2_XXS", 256, 66}, {GGUF_GGML_IQ2_XS, "IQ2_XS", 256, 74},
    {GGUF_GGML_IQ3_XXS, "IQ3_XXS", 256, 98}, {GGUF_GGML_IQ1_S, "IQ1_S", 256, 50},
    {GGUF_GGML_IQ4_NL, "IQ4_NL", 32, 18},  {GGUF_GGML_IQ3_S, "IQ3_S", 256, 110},
    {GGUF_GGML_IQ2_S, "IQ2_S", 256, 82},   {GGUF_GGML_IQ4_XS, "IQ4_XS", 256, 136},
    {GGUF_GGML_I8, "I8", 1, 1},            {GGUF_GGML_I16, "I16", 1, 2},
    {GGUF_GGML_I32, "I32", 1, 4},          {GGUF_GGML_I64, "I64", 1, 8},
    {GGUF_GGML_F64, "F64", 1, 8},          {GGUF_GGML_IQ1_M, "IQ1_M", 256, 56},
    {GGUF_GGML_BF16, "BF16", 1, 2},        {GGUF_GGML_TQ1_0, "TQ1_0", 256, 54},
    {GGUF_GGML_TQ2_0, "TQ2_0", 256, 66},   {GGUF_GGML_MXFP4, "MXFP4", 32, 17},
};

const gguf_type_info *gguf_ggml_type_info(uint32_t ggml_type) {
    for (size_t i = 0; i < sizeof type_table / sizeof type_table[0]; i++)
        if (type_table[i].id == ggml_type) return &type_table[i];
    return NULL;
}

gguf_status gguf_ggml_row_size(uint32_t ggml_type, uint64_t n_elements, uint64_t *out_bytes) {
    const gguf_type_info *ti = gguf_ggml_type_info(ggml_type);
    uint64_t bytes;
    if (!out_bytes) return GGUF_ERR_INVALID_ARG;
    if (!ti) return GGUF_ERR_BAD_TENSOR_TYPE;
    if (n_elements % ti->block_size != 0) return GGUF_ERR_BAD_ROW_SIZE;
    if (!mul_u64(n_elements / ti->block_size, ti->type_size, &bytes) || bytes > INT64_MAX)
        return GGUF_ERR_DIMS_OVERFLOW;
    *out_bytes = bytes;
    return GGUF_OK;
}

/* ======================================================================================
 * names, statuses, value types
 * ====================================================================================== */

const char *gguf_status_name(gguf_status status) {
    switch (status) {
    case GGUF_OK: return "GGUF_OK";
    case GGUF_ERR_INVALID_ARG: return "GGUF_ERR_INVALID_ARG";
    case GGUF_ERR_IO: return "GGUF_ERR_IO";
    case GGUF_ERR_NOMEM: return "GGUF_ERR_NOMEM";
    case GGUF_ERR_TRUNCATED: return "GGUF_ERR_TRUNCATED";
    case GGUF_ERR_BAD_MAGIC: return "GGUF_ERR_BAD_MAGIC";
    case GGUF_ERR_VERSION_1: return "GGUF_ERR_VERSION_1";
    case GGUF_ERR_BAD_VERSION: return "GGUF_ERR_BAD_VERSION";
    case GGUF_ERR_BIG_ENDIAN: return "GGUF_ERR_BIG_ENDIAN";
    case GGUF_ERR_TOO_MANY_KV: return "GGUF_ERR_TOO_MANY_KV";
    case GGUF_ERR_TOO_MANY_TENSORS: return "GGUF_ERR_TOO_MANY_TENSORS";
    case GGUF_ERR_BAD_KEY: return "GGUF_ERR_BAD_KEY";
    case GGUF_ERR_DUPLICATE_KEY: return "GGUF_ERR_DUPLICATE_KEY";
    case GGUF_ERR_BAD_VALUE_TYPE: return "GGUF_ERR_BAD_VALUE_TYPE";
    case GGUF_ERR_NESTED_ARRAY: return "GGUF_ERR_NESTED_ARRAY";
    case GGUF_ERR_BAD_STRING_LENGTH: return "GGUF_ERR_BAD_STRING_LENGTH";
    case GGUF_ERR_BAD_ARRAY_LENGTH: return "GGUF_ERR_BAD_ARRAY_LENGTH";
    case GGUF_ERR_BAD_BOOL: return "GGUF_ERR_BAD_BOOL";
    case GGUF_ERR_BAD_ALIGNMENT: return "GGUF_ERR_BAD_ALIGNMENT";
    case GGUF_ERR_BAD_TENSOR_NAME: return "GGUF_ERR_BAD_TENSOR_NAME";
    case GGUF_ERR_DUPLICATE_TENSOR: return "GGUF_ERR_DUPLICATE_TENSOR";
    case GGUF_ERR_BAD_N_DIMS: return "GGUF_ERR_BAD_N_DIMS";
    case GGUF_ERR_BAD_DIM: return "GGUF_ERR_BAD_DIM";
    case GGUF_ERR_DIMS_OVERFLOW: return "GGUF_ERR_DIMS_OVERFLOW";
    case GGUF_ERR_BAD_TENSOR_TYPE: return "GGUF_ERR_BAD_TENSOR_TYPE";
    case GGUF_ERR_BAD_ROW_SIZE: return "GGUF_ERR_BAD_ROW_SIZE";
    case GGUF_ERR_MISALIGNED_OFFSET: return "GGUF_ERR_MISALIGNED_OFFSET";
    case GGUF_ERR_TENSOR_OUT_OF_BOUNDS: return "GGUF_ERR_TENSOR_OUT_OF_BOUNDS";
    case GGUF_ERR_TENSOR_OVERLAP: return "GGUF_ERR_TENSOR_OVERLAP";
    case GGUF_ERR_NOT_FOUND: return "GGUF_ERR_NOT_FOUND";
    case GGUF_ERR_TYPE_MISMATCH: return "GGUF_ERR_TYPE_MISMATCH";
    case GGUF_ERR_OUT_OF_RANGE: return "GGUF_ERR_OUT_OF_RANGE";
    }
    return "GGUF_ERR_UNKNOWN";
}

const char *gguf_value_type_name(int type) {
    static const char *const names[] = {"uint8",  "int8",  "uint16", "int16", "uint32",
                                        "int32",  "float32", "bool", "string", "array",
                                        "uint64", "int64", "float64"};
    if (type < 0 || (size_t)type >= sizeof names / sizeof names[0]) return "unknown";
    return names[type];
}

size_t gguf_value_type_size(int type) {
    switch (type) {
    case GGUF_VALUE_UINT8: case GGUF_VALUE_INT8: case GGUF_VALUE_BOOL: return 1;
    case GGUF_VALUE_UINT16: case GGUF_VALUE_INT16: return 2;
    case GGUF_VALUE_UINT32: case GGUF_VALUE_INT32: case GGUF_VALUE_FLOAT32: return 4;
    case GGUF_VALUE_UINT64: case GGUF_VALUE_INT64: case GGUF_VALUE_FLOAT64: return 8;
    default: return 0;
    }
}

