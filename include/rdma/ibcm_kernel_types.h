/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * ibcm: the small piece of the Linux kernel environment that the kernel's
 * <rdma/ib_cm.h> API assumes, rebuilt for plain userspace C (C11 or later).
 *
 *   - the kernel scalar typedefs u8 .. u64 and s8 .. s64 (on top of the
 *     __u8 .. __u64 and __be16/32/64 types of <linux/types.h>);
 *   - bool (via <stdbool.h>);
 *   - byte-order helpers cpu_to_be16/32/64 and be16/32/64_to_cpu.  They are
 *     macros, so that, as in the kernel, a constant argument yields an
 *     integer constant expression (usable in case labels, enumerators,
 *     static initialisers and _Static_assert);
 *   - ERR_PTR(), PTR_ERR(), IS_ERR(), IS_ERR_OR_NULL(), ERR_CAST(),
 *     PTR_ERR_OR_ZERO() and MAX_ERRNO with the kernel's meaning: a pointer
 *     returning function reports failure by returning a negative errno
 *     value (-1 .. -MAX_ERRNO) cast to a pointer, i.e. an address in the
 *     last 4095 bytes of the address space.  Such functions never return
 *     NULL.
 *
 * Everything is written for ibcm; no kernel code is reproduced here.
 */
#ifndef IBCM_KERNEL_TYPES_H
#define IBCM_KERNEL_TYPES_H

#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>

/* Kernel-style fixed width types.  C11 allows repeating an identical
 * typedef, so other headers defining the same names do not clash. */
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s8 s8;
typedef __s16 s16;
typedef __s32 s32;
typedef __s64 s64;

/* -------------------------------------------------------------------------
 * Byte order.  __be16/__be32/__be64 hold values in network (big-endian)
 * byte order; the helpers below convert between them and host order.
 * Each argument is evaluated exactly once.
 * ---------------------------------------------------------------------- */
#if !defined(__BYTE_ORDER__) || !defined(__ORDER_LITTLE_ENDIAN__) || \
	!defined(__ORDER_BIG_ENDIAN__)
#error "ibcm headers need a compiler that defines __BYTE_ORDER__ (gcc, clang)"
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define IBCM_SWAP16(x) ((__u16)__builtin_bswap16((__u16)(x)))
#define IBCM_SWAP32(x) ((__u32)__builtin_bswap32((__u32)(x)))
#define IBCM_SWAP64(x) ((__u64)__builtin_bswap64((__u64)(x)))
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define IBCM_SWAP16(x) ((__u16)(x))
#define IBCM_SWAP32(x) ((__u32)(x))
#define IBCM_SWAP64(x) ((__u64)(x))
#else
#error "ibcm headers: unsupported byte order"
#endif

#ifndef cpu_to_be16
#define cpu_to_be16(x) ((__be16)IBCM_SWAP16(x))
#endif
#ifndef cpu_to_be32
#define cpu_to_be32(x) ((__be32)IBCM_SWAP32(x))
#endif
#ifndef cpu_to_be64
#define cpu_to_be64(x) ((__be64)IBCM_SWAP64(x))
#endif
#ifndef be16_to_cpu
#define be16_to_cpu(x) ((__u16)IBCM_SWAP16(x))
#endif
#ifndef be32_to_cpu
#define be32_to_cpu(x) ((__u32)IBCM_SWAP32(x))
#endif
#ifndef be64_to_cpu
#define be64_to_cpu(x) ((__u64)IBCM_SWAP64(x))
#endif

/* -------------------------------------------------------------------------
 * Error pointers (the kernel's <linux/err.h> contract).
 *
 *   struct ib_cm_id *id = ib_create_cm_id(dev, handler, ctx);
 *   if (IS_ERR(id))
 *           return (int)PTR_ERR(id);     // e.g. -ENOMEM
 * ---------------------------------------------------------------------- */
#ifndef MAX_ERRNO
#define MAX_ERRNO 4095

/* True when the value x (an address or a long) encodes an errno value. */
#define IS_ERR_VALUE(x) ((unsigned long)(x) >= (unsigned long)-MAX_ERRNO)

/* Encode a negative errno value (-1 .. -MAX_ERRNO) as a pointer. */
static inline void *ERR_PTR(long error)
{
	return (void *)error;
}

/* Decode the negative errno value held by an error pointer. */
static inline long PTR_ERR(const void *ptr)
{
	return (long)ptr;
}

/* True when ptr is an error pointer (NULL is not an error pointer). */
static inline bool IS_ERR(const void *ptr)
{
	return (unsigned long)ptr >= (unsigned long)-MAX_ERRNO;
}

/* True when ptr is NULL or an error pointer. */
static inline bool IS_ERR_OR_NULL(const void *ptr)
{
	return ptr == NULL || IS_ERR(ptr);
}

/* Re-type an error pointer (the value is unchanged). */
static inline void *ERR_CAST(const void *ptr)
{
	return (void *)(unsigned long)ptr;
}

/* The errno value of an error pointer, 0 for any other pointer. */
static inline int PTR_ERR_OR_ZERO(const void *ptr)
{
	return IS_ERR(ptr) ? (int)PTR_ERR(ptr) : 0;
}
#endif /* MAX_ERRNO */

/* Marks a function whose result depends only on its arguments. */
#if defined(__GNUC__)
#define IBCM_ATTR_CONST __attribute__((__const__))
#else
#define IBCM_ATTR_CONST
#endif

#endif /* IBCM_KERNEL_TYPES_H */
