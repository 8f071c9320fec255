/* Shared between the files of src/api only. */
#ifndef BLOCKD_API_INTERNAL_H
#define BLOCKD_API_INTERNAL_H

#include <stddef.h>

#include "api/api.h"

/* core.ping, core.get_methods: registered before any module's table. */
extern const struct api_method api_core_methods[];
extern const size_t api_core_method_count;

/* "EINVAL" for EINVAL (sign ignored); "EFAULT" for unknown numbers. */
const char *api_errno_name(int errnum);

#endif
