/*
 * vafake: a VA-API driver for tests, loaded by the real libva instead of a GPU's driver.
 *
 * Why: the machines that run the suite have no GPU, and the real drivers (iHD, radeonsi) talk to
 * the kernel and fail at init on anything but real hardware.
 * This driver answers the capability queries from a text file, so the agent's whole query path
 * (ctypes -> libva.so.2 -> libva-drm.so.2 -> a driver) runs for real, with only the hardware
 * replaced.
 *
 * Loaded through LIBVA_DRIVERS_PATH=<dir> and LIBVA_DRIVER_NAME=vafake. VAFAKE_CAPS names a caps
 * file, or a directory holding one file per render node (<basename of the node>.txt, e.g.
 * renderD128.txt); the node is found from the fd given to vaGetDisplayDRM.
 *
 * Caps file lines ('#' starts a comment):
 *   vendor <text>                           the vendor string (vaQueryVendorString)
 *   vpp <FOURCC> ...                        pixel formats the VideoProc config accepts
 *   <VAProfileX> <VAEntrypointY> [RT ...]   a profile/entrypoint pair with its render-target
 *                                           formats (YUV420, VA_RT_FORMAT_YUV420_10, ...; "none"
 *                                           makes the attribute VA_ATTRIB_NOT_SUPPORTED)
 *   hang <vaFunction> [seconds]             sleep in that call (forever without seconds)
 *   fail <vaFunction> [status]              return status (default OPERATION_FAILED)
 *   crash <vaFunction>                      abort() in that call
 *   say <text>                              printf the text on stdout at init, as chatty
 *                                           drivers do
 * Misbehaviour a hostile or broken driver shows (all at init):
 *   spam <count> [bytes]                    send <count> info messages through libva's
 *                                           callback, each <bytes> long (default 40) and laced
 *                                           with an escape sequence and a bidi override
 *   bigvendor <bytes>                       a vendor string of <bytes> bytes, laced the same way
 *   noise <bytes>                           write <bytes> bytes on stderr
 *   daemon <pidfile>                        fork a helper that calls setsid() and sleeps forever
 *                                           (the driver writes its pid to <pidfile>) holding every inherited
 *                                           descriptor (the answer's pipe included)
 * <vaFunction> is vaInitialize (the driver's init), vaTerminate, vaQueryConfigProfiles,
 * vaQueryConfigEntrypoints, vaGetConfigAttributes, vaCreateConfig, vaDestroyConfig or
 * vaQuerySurfaceAttributes.
 * Defaults when the file is silent: RT format YUV420, plus YUV420_10 for HEVCMain10,
 * VP9Profile2, AV1Profile0 and the video processor; video processor formats as the real drivers
 * build them: with "Intel iHD" in the vendor string NV12 plus iHD's fixed
 * list (which has P010), otherwise NV12 for YUV420 and P010 for YUV420_10 in its RT format.
 * Profile and entrypoint names are resolved through libva's own vaProfileStr/vaEntrypointStr.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <va/va.h>
#include <va/va_backend.h>
#include <va/va_drmcommon.h>
#include <va/va_str.h>

#define MAX_PAIRS 256
#define MAX_VPP 64
#define MAX_FAULTS 16
#define MAX_CONFIGS 64

struct pair { VAProfile profile; VAEntrypoint entrypoint; unsigned int rt; };
struct fault { char fn[64]; char kind; double secs; VAStatus status; }; /* kind: h f c */
struct config { int used; VAProfile profile; VAEntrypoint entrypoint; unsigned int rt; };

static struct pair pairs[MAX_PAIRS];
static int npairs;
static unsigned int vpp[MAX_VPP];
static int nvpp = -1; /* -1: no vpp line, use the default */
static struct fault faults[MAX_FAULTS];
static int nfaults;
static struct config configs[MAX_CONFIGS];
static char vendor[512] = "vafake test driver";
static char say[512];
static long spam_count, spam_bytes = 40, bigvendor_bytes, noise_bytes;
static char daemon_pidfile[PATH_MAX];
/* ESC [31m (a terminal colour), U+202E RIGHT-TO-LEFT OVERRIDE, U+2028 LINE SEPARATOR, newline. */
static const char LACE[] = "\x1b[31m\xe2\x80\xae\xe2\x80\xa8\n";

static const struct { const char *name; unsigned int value; } rt_names[] = {
    {"YUV420", VA_RT_FORMAT_YUV420}, {"YUV422", VA_RT_FORMAT_YUV422},
    {"YUV444", VA_RT_FORMAT_YUV444}, {"YUV411", VA_RT_FORMAT_YUV411},
    {"YUV400", VA_RT_FORMAT_YUV400}, {"YUV420_10", VA_RT_FORMAT_YUV420_10},
    {"YUV422_10", VA_RT_FORMAT_YUV422_10}, {"YUV444_10", VA_RT_FORMAT_YUV444_10},
    {"YUV420_12", VA_RT_FORMAT_YUV420_12}, {"YUV422_12", VA_RT_FORMAT_YUV422_12},
    {"YUV444_12", VA_RT_FORMAT_YUV444_12}, {"RGB16", VA_RT_FORMAT_RGB16},
    {"RGB32", VA_RT_FORMAT_RGB32}, {"RGBP", VA_RT_FORMAT_RGBP},
    {"RGB32_10", VA_RT_FORMAT_RGB32_10}, {"PROTECTED", VA_RT_FORMAT_PROTECTED},
    {"none", VA_ATTRIB_NOT_SUPPORTED},
};

/* The fourccs iHD adds after NV12 for any video processor config (MediaLibvaCaps, m_vpSurfaceAttr;
 * the drivers' source). Only P010 matters to the agent; the rest make the list realistic. */
static const char *ihd_vpp[] = {"NV12", "I420", "YV12", "YUY2", "UYVY", "P010", "RGBA", "BGRA",
                                "AYUV", "Y210", "Y410", "P016", NULL};

static unsigned int fourcc(const char *s)
{
    char c[4] = {' ', ' ', ' ', ' '};
    for (int i = 0; i < 4 && s[i]; i++)
        c[i] = s[i];
    return VA_FOURCC(c[0], c[1], c[2], c[3]);
}

static int profile_by_name(const char *name, VAProfile *out)
{
    for (int p = -1; p < 128; p++) {
        if (strcmp(vaProfileStr((VAProfile)p), name) == 0) {
            *out = (VAProfile)p;
            return 0;
        }
    }
    return -1;
}

static int entrypoint_by_name(const char *name, VAEntrypoint *out)
{
    for (int e = 1; e < 64; e++) {
        if (strcmp(vaEntrypointStr((VAEntrypoint)e), name) == 0) {
            *out = (VAEntrypoint)e;
            return 0;
        }
    }
    return -1;
}

static int rt_by_name(const char *name, unsigned int *out)
{
    if (strncmp(name, "VA_RT_FORMAT_", 13) == 0)
        name += 13;
    for (size_t i = 0; i < sizeof(rt_names) / sizeof(rt_names[0]); i++) {
        if (strcmp(rt_names[i].name, name) == 0) {
            *out = rt_names[i].value;
            return 0;
        }
    }
    return -1;
}

static unsigned int default_rt(VAProfile p, VAEntrypoint e)
{
    if (p == VAProfileHEVCMain10 || p == VAProfileVP9Profile2 || p == VAProfileAV1Profile0 ||
        (p == VAProfileNone && e == VAEntrypointVideoProc))
        return VA_RT_FORMAT_YUV420 | VA_RT_FORMAT_YUV420_10;
    return VA_RT_FORMAT_YUV420;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
}

/* Returns 0, or -1 with a message on stderr (the driver's init then fails). */
static int load_caps(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "vafake: cannot open caps file %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        trim(line);
        char *s = line;
        while (isspace((unsigned char)*s))
            s++;
        if (!*s || *s == '#')
            continue;
        if (strncmp(s, "vendor ", 7) == 0) {
            snprintf(vendor, sizeof(vendor), "%s", s + 7);
            continue;
        }
        if (strncmp(s, "say ", 4) == 0) {
            snprintf(say, sizeof(say), "%s", s + 4);
            continue;
        }
        if (strncmp(s, "daemon ", 7) == 0) {
            snprintf(daemon_pidfile, sizeof(daemon_pidfile), "%s", s + 7);
            continue;
        }
        if (sscanf(s, "spam %ld %ld", &spam_count, &spam_bytes) >= 1)
            continue;
        if (sscanf(s, "bigvendor %ld", &bigvendor_bytes) == 1)
            continue;
        if (sscanf(s, "noise %ld", &noise_bytes) == 1)
            continue;
        char *save = NULL;
        char *tok = strtok_r(s, " \t", &save);
        if (strcmp(tok, "vpp") == 0) {
            nvpp = 0;
            while ((tok = strtok_r(NULL, " \t", &save)) && nvpp < MAX_VPP)
                vpp[nvpp++] = fourcc(tok);
        } else if (!strcmp(tok, "hang") || !strcmp(tok, "fail") || !strcmp(tok, "crash")) {
            char kind = tok[0];
            char *fn = strtok_r(NULL, " \t", &save);
            char *arg = strtok_r(NULL, " \t", &save);
            if (!fn || nfaults >= MAX_FAULTS)
                goto bad;
            struct fault *ft = &faults[nfaults++];
            snprintf(ft->fn, sizeof(ft->fn), "%s", fn);
            ft->kind = kind;
            ft->secs = (kind == 'h' && arg) ? strtod(arg, NULL) : -1;
            ft->status = (kind == 'f' && arg) ? (VAStatus)strtoul(arg, NULL, 0)
                                              : VA_STATUS_ERROR_OPERATION_FAILED;
        } else if (strncmp(tok, "VAProfile", 9) == 0) {
            char *ep = strtok_r(NULL, " \t", &save);
            if (!ep || npairs >= MAX_PAIRS)
                goto bad;
            struct pair *pr = &pairs[npairs];
            if (profile_by_name(tok, &pr->profile) || entrypoint_by_name(ep, &pr->entrypoint))
                goto bad;
            unsigned int rt = 0, v;
            int any = 0;
            while ((tok = strtok_r(NULL, " \t", &save))) {
                if (rt_by_name(tok, &v))
                    goto bad;
                rt |= v;
                any = 1;
            }
            pr->rt = any ? rt : default_rt(pr->profile, pr->entrypoint);
            npairs++;
        } else {
            goto bad;
        }
        continue;
    bad:
        fprintf(stderr, "vafake: %s:%d: cannot read this line\n", path, lineno);
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}

/* Runs the fault a caps file sets for this call, if any; returns the status to fail with or 0. */
static VAStatus fault(const char *fn)
{
    for (int i = 0; i < nfaults; i++) {
        struct fault *ft = &faults[i];
        if (strcmp(ft->fn, fn) != 0)
            continue;
        if (ft->kind == 'c') {
            fprintf(stderr, "vafake: crashing in %s\n", fn);
            abort();
        }
        if (ft->kind == 'h') {
            if (ft->secs < 0)
                for (;;)
                    pause();
            usleep((useconds_t)(ft->secs * 1e6));
            continue;
        }
        return ft->status;
    }
    return VA_STATUS_SUCCESS;
}

#define FAULT(fn)                        \
    do {                                 \
        VAStatus st_ = fault(fn);        \
        if (st_ != VA_STATUS_SUCCESS)    \
            return st_;                  \
    } while (0)

static int has_profile(VAProfile p)
{
    for (int i = 0; i < npairs; i++)
        if (pairs[i].profile == p)
            return 1;
    return 0;
}

static const struct pair *find_pair(VAProfile p, VAEntrypoint e)
{
    for (int i = 0; i < npairs; i++)
        if (pairs[i].profile == p && pairs[i].entrypoint == e)
            return &pairs[i];
    return NULL;
}

static VAStatus fake_Terminate(VADriverContextP ctx)
{
    (void)ctx;
    FAULT("vaTerminate");
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_QueryConfigProfiles(VADriverContextP ctx, VAProfile *list, int *num)
{
    (void)ctx;
    FAULT("vaQueryConfigProfiles");
    int n = 0;
    for (int i = 0; i < npairs; i++) {
        int seen = 0;
        for (int j = 0; j < n; j++)
            seen |= list[j] == pairs[i].profile;
        if (!seen)
            list[n++] = pairs[i].profile;
    }
    *num = n;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_QueryConfigEntrypoints(VADriverContextP ctx, VAProfile p, VAEntrypoint *list,
                                            int *num)
{
    (void)ctx;
    FAULT("vaQueryConfigEntrypoints");
    if (!has_profile(p))
        return VA_STATUS_ERROR_UNSUPPORTED_PROFILE;
    int n = 0;
    for (int i = 0; i < npairs; i++)
        if (pairs[i].profile == p)
            list[n++] = pairs[i].entrypoint;
    *num = n;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_GetConfigAttributes(VADriverContextP ctx, VAProfile p, VAEntrypoint e,
                                         VAConfigAttrib *attribs, int num)
{
    (void)ctx;
    FAULT("vaGetConfigAttributes");
    const struct pair *pr = find_pair(p, e);
    if (!pr)
        return has_profile(p) ? VA_STATUS_ERROR_UNSUPPORTED_ENTRYPOINT
                              : VA_STATUS_ERROR_UNSUPPORTED_PROFILE;
    for (int i = 0; i < num; i++)
        attribs[i].value = attribs[i].type == VAConfigAttribRTFormat ? pr->rt
                                                                      : VA_ATTRIB_NOT_SUPPORTED;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_CreateConfig(VADriverContextP ctx, VAProfile p, VAEntrypoint e,
                                  VAConfigAttrib *attribs, int num, VAConfigID *id)
{
    (void)ctx;
    FAULT("vaCreateConfig");
    const struct pair *pr = find_pair(p, e);
    if (!pr)
        return has_profile(p) ? VA_STATUS_ERROR_UNSUPPORTED_ENTRYPOINT
                              : VA_STATUS_ERROR_UNSUPPORTED_PROFILE;
    unsigned int rt = pr->rt;
    for (int i = 0; i < num; i++) {
        if (attribs[i].type != VAConfigAttribRTFormat)
            continue;
        if (pr->rt == VA_ATTRIB_NOT_SUPPORTED || !(attribs[i].value & pr->rt))
            return VA_STATUS_ERROR_UNSUPPORTED_RT_FORMAT;
        rt = attribs[i].value;
    }
    for (int i = 0; i < MAX_CONFIGS; i++) {
        if (!configs[i].used) {
            configs[i] = (struct config){1, p, e, rt};
            *id = (VAConfigID)i;
            return VA_STATUS_SUCCESS;
        }
    }
    return VA_STATUS_ERROR_MAX_NUM_EXCEEDED;
}

static struct config *get_config(VAConfigID id)
{
    return id < MAX_CONFIGS && configs[id].used ? &configs[id] : NULL;
}

static VAStatus fake_DestroyConfig(VADriverContextP ctx, VAConfigID id)
{
    (void)ctx;
    FAULT("vaDestroyConfig");
    struct config *c = get_config(id);
    if (!c)
        return VA_STATUS_ERROR_INVALID_CONFIG;
    c->used = 0;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_QueryConfigAttributes(VADriverContextP ctx, VAConfigID id, VAProfile *p,
                                           VAEntrypoint *e, VAConfigAttrib *attribs, int *num)
{
    (void)ctx;
    struct config *c = get_config(id);
    if (!c)
        return VA_STATUS_ERROR_INVALID_CONFIG;
    *p = c->profile;
    *e = c->entrypoint;
    attribs[0].type = VAConfigAttribRTFormat;
    attribs[0].value = c->rt;
    *num = 1;
    return VA_STATUS_SUCCESS;
}

/* The pixel formats a config's surfaces may have. */
static int surface_formats(const struct config *c, unsigned int *out)
{
    int n = 0;
    if (c->profile == VAProfileNone && c->entrypoint == VAEntrypointVideoProc && nvpp >= 0) {
        for (int i = 0; i < nvpp; i++)
            out[n++] = vpp[i];
        return n;
    }
    if (c->profile == VAProfileNone && c->entrypoint == VAEntrypointVideoProc &&
        strstr(vendor, "Intel iHD")) {
        for (int i = 0; ihd_vpp[i]; i++)
            out[n++] = fourcc(ihd_vpp[i]);
        return n;
    }
    if (c->rt != VA_ATTRIB_NOT_SUPPORTED && (c->rt & VA_RT_FORMAT_YUV420))
        out[n++] = VA_FOURCC_NV12;
    if (c->rt != VA_ATTRIB_NOT_SUPPORTED && (c->rt & VA_RT_FORMAT_YUV420_10))
        out[n++] = VA_FOURCC_P010;
    return n;
}

static void put_int(VASurfaceAttrib *a, VASurfaceAttribType type, int value)
{
    a->type = type;
    a->flags = VA_SURFACE_ATTRIB_GETTABLE;
    a->value.type = VAGenericValueTypeInteger;
    a->value.value.i = value;
}

/* The two-call protocol of the real drivers: a NULL list gets an upper
 * bound, a short list gets MAX_NUM_EXCEEDED and the real count. Besides the pixel formats the
 * list carries size and memory-type attributes, as real drivers do, so a caller must filter on
 * the attribute type. */
static VAStatus fake_QuerySurfaceAttributes(VADriverContextP ctx, VAConfigID id,
                                            VASurfaceAttrib *list, unsigned int *num)
{
    (void)ctx;
    FAULT("vaQuerySurfaceAttributes");
    struct config *c = get_config(id);
    if (!c)
        return VA_STATUS_ERROR_INVALID_CONFIG;
    unsigned int formats[MAX_VPP + 16];
    int nf = surface_formats(c, formats);
    unsigned int count = (unsigned int)nf + 5;
    if (!list) {
        *num = count + 32;
        return VA_STATUS_SUCCESS;
    }
    if (*num < count) {
        *num = count;
        return VA_STATUS_ERROR_MAX_NUM_EXCEEDED;
    }
    VASurfaceAttrib *a = list;
    put_int(a++, VASurfaceAttribMinWidth, 16);
    put_int(a++, VASurfaceAttribMaxWidth, 16384);
    put_int(a++, VASurfaceAttribMinHeight, 16);
    put_int(a++, VASurfaceAttribMaxHeight, 16384);
    put_int(a++, VASurfaceAttribMemoryType,
            VA_SURFACE_ATTRIB_MEM_TYPE_VA | VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2);
    for (int i = 0; i < nf; i++) {
        put_int(a, VASurfaceAttribPixelFormat, (int)formats[i]);
        a->flags |= VA_SURFACE_ATTRIB_SETTABLE;
        a++;
    }
    *num = count;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_EmptyImageFormats(VADriverContextP ctx, VAImageFormat *list, int *num)
{
    (void)ctx;
    (void)list;
    *num = 0;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_EmptySubpictureFormats(VADriverContextP ctx, VAImageFormat *list,
                                            unsigned int *flags, unsigned int *num)
{
    (void)ctx;
    (void)list;
    (void)flags;
    *num = 0;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_EmptyDisplayAttributes(VADriverContextP ctx, VADisplayAttribute *list,
                                            int *num)
{
    (void)ctx;
    (void)list;
    *num = 0;
    return VA_STATUS_SUCCESS;
}

/* Every other entry point: nothing here renders. Called through the vtable's own pointer type;
 * on the SysV x86_64 and AAPCS64 ABIs the ignored arguments are harmless. */
static VAStatus fake_Unimplemented(void)
{
    return VA_STATUS_ERROR_UNIMPLEMENTED;
}

#define STUB(slot) vt->slot = (__typeof__(vt->slot))(void (*)(void))fake_Unimplemented

/* The caps file for this display: VAFAKE_CAPS itself, or <VAFAKE_CAPS>/<node basename>.txt. */
static int caps_path(VADriverContextP ctx, char *out, size_t len)
{
    const char *caps = getenv("VAFAKE_CAPS");
    if (!caps) {
        fprintf(stderr, "vafake: VAFAKE_CAPS is not set\n");
        return -1;
    }
    struct stat st;
    if (stat(caps, &st) == 0 && S_ISDIR(st.st_mode)) {
        struct drm_state *drm = ctx->drm_state;
        char link[64], node[PATH_MAX];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", drm ? drm->fd : -1);
        ssize_t n = readlink(link, node, sizeof(node) - 1);
        if (n < 0) {
            fprintf(stderr, "vafake: cannot find the node of the display: %s\n", strerror(errno));
            return -1;
        }
        node[n] = 0;
        const char *base = strrchr(node, '/');
        snprintf(out, len, "%s/%s.txt", caps, base ? base + 1 : node);
    } else {
        snprintf(out, len, "%s", caps);
    }
    return 0;
}

/* A buffer of <n> bytes: text laced with LACE every 64 bytes, NUL-terminated. */
static char *laced(long n)
{
    char *buf = malloc((size_t)n + 1);
    if (!buf)
        abort();
    for (long i = 0; i < n; i++)
        buf[i] = (char)('a' + i % 26);
    for (long i = 0; i + (long)sizeof(LACE) - 1 <= n; i += 64)
        memcpy(buf + i, LACE, sizeof(LACE) - 1);
    buf[n] = 0;
    return buf;
}

static void misbehave(VADriverContextP ctx)
{
    if (daemon_pidfile[0]) {
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            for (;;)
                pause();
        }
        /* The driver writes the helper's pid, before its query goes on: a helper ended early
         * (by the agent's sweep) is still named, so a test can check that it is gone. */
        if (pid > 0) {
            FILE *f = fopen(daemon_pidfile, "w");
            if (f) {
                fprintf(f, "%d\n", (int)pid);
                fclose(f);
            }
        }
    }
    if (noise_bytes > 0) {
        char chunk[4096];
        memset(chunk, 'n', sizeof(chunk));
        for (long left = noise_bytes; left > 0; left -= (long)sizeof(chunk))
            if (write(2, chunk, left < (long)sizeof(chunk) ? (size_t)left : sizeof(chunk)) < 0)
                break;
    }
    if (spam_count > 0 && ctx->info_callback) {
        char *msg = laced(spam_bytes);
        for (long i = 0; i < spam_count; i++)
            ctx->info_callback(ctx, msg);
        free(msg);
    }
    if (bigvendor_bytes > 0)
        ctx->str_vendor = laced(bigvendor_bytes); /* kept for the display's life */
}

VAStatus __vaDriverInit_1_0(VADriverContextP ctx);

VAStatus __vaDriverInit_1_0(VADriverContextP ctx)
{
    char path[PATH_MAX + 16];
    if (caps_path(ctx, path, sizeof(path)) || load_caps(path))
        return VA_STATUS_ERROR_OPERATION_FAILED;
    if (say[0]) {
        printf("%s\n", say);
        fflush(stdout);
    }
    FAULT("vaInitialize");

    struct VADriverVTable *vt = ctx->vtable;
    vt->vaTerminate = fake_Terminate;
    vt->vaQueryConfigProfiles = fake_QueryConfigProfiles;
    vt->vaQueryConfigEntrypoints = fake_QueryConfigEntrypoints;
    vt->vaGetConfigAttributes = fake_GetConfigAttributes;
    vt->vaCreateConfig = fake_CreateConfig;
    vt->vaDestroyConfig = fake_DestroyConfig;
    vt->vaQueryConfigAttributes = fake_QueryConfigAttributes;
    vt->vaQuerySurfaceAttributes = fake_QuerySurfaceAttributes;
    vt->vaQueryImageFormats = fake_EmptyImageFormats;
    vt->vaQuerySubpictureFormats = fake_EmptySubpictureFormats;
    vt->vaQueryDisplayAttributes = fake_EmptyDisplayAttributes;
    STUB(vaCreateSurfaces);
    STUB(vaDestroySurfaces);
    STUB(vaCreateContext);
    STUB(vaDestroyContext);
    STUB(vaCreateBuffer);
    STUB(vaBufferSetNumElements);
    STUB(vaMapBuffer);
    STUB(vaUnmapBuffer);
    STUB(vaDestroyBuffer);
    STUB(vaBeginPicture);
    STUB(vaRenderPicture);
    STUB(vaEndPicture);
    STUB(vaSyncSurface);
    STUB(vaQuerySurfaceStatus);
    STUB(vaPutSurface);
    STUB(vaCreateImage);
    STUB(vaDeriveImage);
    STUB(vaDestroyImage);
    STUB(vaSetImagePalette);
    STUB(vaGetImage);
    STUB(vaPutImage);
    STUB(vaCreateSubpicture);
    STUB(vaDestroySubpicture);
    STUB(vaSetSubpictureImage);
    STUB(vaSetSubpictureChromakey);
    STUB(vaSetSubpictureGlobalAlpha);
    STUB(vaAssociateSubpicture);
    STUB(vaDeassociateSubpicture);
    STUB(vaGetDisplayAttributes);
    STUB(vaSetDisplayAttributes);

    ctx->version_major = VA_MAJOR_VERSION;
    ctx->version_minor = VA_MINOR_VERSION;
    ctx->max_profiles = MAX_PAIRS;
    ctx->max_entrypoints = 32;
    ctx->max_attributes = 8;
    ctx->max_image_formats = 1;
    ctx->max_subpic_formats = 1;
    ctx->max_display_attributes = 1;
    ctx->str_vendor = vendor;
    misbehave(ctx);
    return VA_STATUS_SUCCESS;
}

/* libva's loader looks for __vaDriverInit_1_<its minor> first, then each lower minor down to
 * 1_0: export the minor we were built against too. */
#define INIT_NAME_(minor) __vaDriverInit_1_##minor
#define INIT_NAME(minor) INIT_NAME_(minor)
VAStatus INIT_NAME(VA_MINOR_VERSION)(VADriverContextP ctx)
    __attribute__((alias("__vaDriverInit_1_0")));
