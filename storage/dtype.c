#include "storage/dtype.h"

size_t dtype_size(dtype_kind k)
{
    switch (k) {
    case DT_BOOL: case DT_INT8: case DT_UINT8: return 1;
    case DT_INT16: case DT_UINT16: case DT_FLOAT16: return 2;
    case DT_INT32: case DT_UINT32: case DT_FLOAT32: return 4;
    case DT_INT64: case DT_UINT64: case DT_FLOAT64: return 8;
    default: return 0;
    }
}

const char *dtype_name(dtype_kind k)
{
    switch (k) {
    case DT_BOOL: return "bool";
    case DT_INT8: return "int8";
    case DT_INT16: return "int16";
    case DT_INT32: return "int32";
    case DT_INT64: return "int64";
    case DT_UINT8: return "uint8";
    case DT_UINT16: return "uint16";
    case DT_UINT32: return "uint32";
    case DT_UINT64: return "uint64";
    case DT_FLOAT16: return "float16";
    case DT_FLOAT32: return "float32";
    case DT_FLOAT64: return "float64";
    case DT_STRING: return "str";
    default: return "none";
    }
}

const char *dtype_npy_descr(dtype_kind k)
{
    switch (k) {
    case DT_BOOL: return "|b1";
    case DT_INT8: return "|i1";
    case DT_INT16: return "<i2";
    case DT_INT32: return "<i4";
    case DT_INT64: return "<i8";
    case DT_UINT8: return "|u1";
    case DT_UINT16: return "<u2";
    case DT_UINT32: return "<u4";
    case DT_UINT64: return "<u8";
    case DT_FLOAT16: return "<f2";
    case DT_FLOAT32: return "<f4";
    case DT_FLOAT64: return "<f8";
    default: return NULL;
    }
}

int dtype_is_integer(dtype_kind k)
{
    return k >= DT_INT8 && k <= DT_UINT64;
}

int dtype_is_signed(dtype_kind k)
{
    return k >= DT_INT8 && k <= DT_INT64;
}

int dtype_is_float(dtype_kind k)
{
    return k >= DT_FLOAT16 && k <= DT_FLOAT64;
}

int dtype_is_numeric(dtype_kind k)
{
    return k == DT_BOOL || dtype_is_integer(k) || dtype_is_float(k);
}
