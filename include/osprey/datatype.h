/*
 * Tensor element types, their byte sizes and their names on the wire
 * ("FP32") and in config.pbtxt ("TYPE_FP32"; TYPE_STRING <-> BYTES).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum osp_datatype {
    OSP_TYPE_INVALID = 0,
    OSP_TYPE_BOOL,
    OSP_TYPE_UINT8,
    OSP_TYPE_UINT16,
    OSP_TYPE_UINT32,
    OSP_TYPE_UINT64,
    OSP_TYPE_INT8,
    OSP_TYPE_INT16,
    OSP_TYPE_INT32,
    OSP_TYPE_INT64,
    OSP_TYPE_FP16,
    OSP_TYPE_FP32,
    OSP_TYPE_FP64,
    OSP_TYPE_BYTES,
    OSP_TYPE_BF16,
    OSP_TYPE_COUNT_
} osp_datatype;

/* Bytes per element; 0 for BYTES (variable: 4-byte LE length + bytes each)
 * and for INVALID. */
size_t osp_datatype_byte_size(osp_datatype dt);
/* "FP32", "BYTES", ...; "<invalid>" (TRITONSERVER_DataTypeString's
 * word) for anything else. Static string. */
const char *osp_datatype_wire_name(osp_datatype dt);
/* "TYPE_FP32", "TYPE_STRING", ...; "TYPE_INVALID" otherwise. */
const char *osp_datatype_config_name(osp_datatype dt);
/* Exact, case-sensitive match; OSP_TYPE_INVALID when unknown. */
osp_datatype osp_datatype_from_wire_name(const char *name);
osp_datatype osp_datatype_from_config_name(const char *name);

#ifdef __cplusplus
}
#endif
