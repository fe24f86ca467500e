/*
 * drmshim: an LD_PRELOAD shim that makes libdrm accept a plain file as a DRM render node.
 *
 * Why: libva's vaGetDisplayDRM only takes an fd for which libdrm's drmGetNodeTypeFromFd() finds a
 * DRM character device in sysfs, and this machine's kernel has
 * no DRM at all. For fds whose path lies under VAFAKE_DRM_PREFIX this shim answers "render node"
 * (DRM_NODE_RENDER = 2, xf86drm.h), and drmGetVersion answers the kernel driver name in
 * VAFAKE_DRM_NAME (when set), so libva's own kernel-to-VA driver name map can be exercised.
 * Every other fd goes to the real libdrm.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xf86drm.h>

static int is_fake(int fd)
{
    const char *prefix = getenv("VAFAKE_DRM_PREFIX");
    if (!prefix || !*prefix)
        return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n < 0)
        return 0;
    path[n] = 0;
    return strncmp(path, prefix, strlen(prefix)) == 0;
}

int drmGetNodeTypeFromFd(int fd)
{
    if (is_fake(fd))
        return DRM_NODE_RENDER;
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "drmGetNodeTypeFromFd");
    return real ? real(fd) : -1;
}

drmVersionPtr drmGetVersion(int fd)
{
    const char *name = getenv("VAFAKE_DRM_NAME");
    if (is_fake(fd) && name && *name) {
        /* libva frees it with the real drmFreeVersion, which free()s each string. */
        drmVersionPtr v = calloc(1, sizeof(*v));
        if (!v)
            return NULL;
        v->name = strdup(name);
        v->name_len = (int)strlen(name);
        v->date = strdup("");
        v->desc = strdup("");
        return v;
    }
    drmVersionPtr (*real)(int) = (drmVersionPtr(*)(int))dlsym(RTLD_NEXT, "drmGetVersion");
    return real ? real(fd) : NULL;
}
