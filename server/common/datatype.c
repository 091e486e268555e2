/* Datatype sizes and names: one table. */
#include "osprey/datatype.h"

#include <string.h>

static const struct {
    size_t size;
    const char *wire;
    const char *config;
} type_table[OSP_TYPE_COUNT_] = {
    [OSP_TYPE_INVALID] = {0, "<invalid>", "TYPE_INVALID"},
    [OSP_TYPE_BOOL] = {1, "BOOL", "TYPE_BOOL"},
    [OSP_TYPE_UINT8] = {1, "UINT8", "TYPE_UINT8"},
    [OSP_TYPE_UINT16] = {2, "UINT16", "TYPE_UINT16"},
    [OSP_TYPE_UINT32] = {4, "UINT32", "TYPE_UINT32"},
    [OSP_TYPE_UINT64] = {8, "UINT64", "TYPE_UINT64"},
    [OSP_TYPE_INT8] = {1, "INT8", "TYPE_INT8"},
    [OSP_TYPE_INT16] = {2, "INT16", "TYPE_INT16"},
    [OSP_TYPE_INT32] = {4, "INT32", "TYPE_INT32"},
    [OSP_TYPE_INT64] = {8, "INT64", "TYPE_INT64"},
    [OSP_TYPE_FP16] = {2, "FP16", "TYPE_FP16"},
    [OSP_TYPE_FP32] = {4, "FP32", "TYPE_FP32"},
    [OSP_TYPE_FP64] = {8, "FP64", "TYPE_FP64"},
    [OSP_TYPE_BYTES] = {0, "BYTES", "TYPE_STRING"},
    [OSP_TYPE_BF16] = {2, "BF16", "TYPE_BF16"},
};

static int valid_type(osp_datatype dt) {
    return (unsigned)dt < OSP_TYPE_COUNT_;
}

size_t osp_datatype_byte_size(osp_datatype dt) {
    return valid_type(dt) ? type_table[dt].size : 0;
}

const char *osp_datatype_wire_name(osp_datatype dt) {
    return valid_type(dt) ? type_table[dt].wire : "<invalid>";
}

const char *osp_datatype_config_name(osp_datatype dt) {
    return valid_type(dt) ? type_table[dt].config : "TYPE_INVALID";
}

osp_datatype osp_datatype_from_wire_name(const char *name) {
    for (int dt = OSP_TYPE_BOOL; name && dt < OSP_TYPE_COUNT_; dt++)
        if (strcmp(type_table[dt].wire, name) == 0)
            return (osp_datatype)dt;
    return OSP_TYPE_INVALID;
}

osp_datatype osp_datatype_from_config_name(const char *name) {
    for (int dt = OSP_TYPE_BOOL; name && dt < OSP_TYPE_COUNT_; dt++)
        if (strcmp(type_table[dt].config, name) == 0)
            return (osp_datatype)dt;
    return OSP_TYPE_INVALID;
}
