/*
 * TensorFlow's names of the Osprey datatypes (tfs_codec.h): the DataType
 * enum name metadata shows and the DataTypeString messages use.
 */
#include <string.h>

#include "tfs_codec.h"

static const struct {
    osp_datatype dtype;
    const char *enum_name; /* DT_* */
    const char *string;    /* DataTypeString */
} tf_types[] = {
    {OSP_TYPE_BOOL, "DT_BOOL", "bool"},
    {OSP_TYPE_UINT8, "DT_UINT8", "uint8"},
    {OSP_TYPE_UINT16, "DT_UINT16", "uint16"},
    {OSP_TYPE_UINT32, "DT_UINT32", "uint32"},
    {OSP_TYPE_UINT64, "DT_UINT64", "uint64"},
    {OSP_TYPE_INT8, "DT_INT8", "int8"},
    {OSP_TYPE_INT16, "DT_INT16", "int16"},
    {OSP_TYPE_INT32, "DT_INT32", "int32"},
    {OSP_TYPE_INT64, "DT_INT64", "int64"},
    {OSP_TYPE_FP16, "DT_HALF", "half"},
    {OSP_TYPE_FP32, "DT_FLOAT", "float"},
    {OSP_TYPE_FP64, "DT_DOUBLE", "double"},
    {OSP_TYPE_BYTES, "DT_STRING", "string"},
    {OSP_TYPE_BF16, "DT_BFLOAT16", "bfloat16"},
};

#define N_TF_TYPES (sizeof tf_types / sizeof tf_types[0])

const char *tfs_dtype_string(osp_datatype dt) {
    for (size_t i = 0; i < N_TF_TYPES; i++)
        if (tf_types[i].dtype == dt)
            return tf_types[i].string;
    return "INVALID";
}

const char *tfs_dtype_enum_name(osp_datatype dt) {
    for (size_t i = 0; i < N_TF_TYPES; i++)
        if (tf_types[i].dtype == dt)
            return tf_types[i].enum_name;
    return "DT_INVALID";
}

osp_datatype tfs_dtype_from_enum_name(const char *name) {
    for (size_t i = 0; i < N_TF_TYPES; i++)
        if (strcmp(tf_types[i].enum_name, name) == 0)
            return tf_types[i].dtype;
    return OSP_TYPE_INVALID;
}
