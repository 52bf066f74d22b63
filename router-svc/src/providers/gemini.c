/* gemini: Google's generateContent dialect (the Gemini API's and Vertex AI's Gemini models) to
 * and from OpenAI chat; embeddings (batchEmbedContents, Vertex predict). See provider.h (struct
 * rt_dialect).
 *
 * Field names and meanings from Google's API references (ai.google.dev/api/generate-content,
 * ai.google.dev/api/caching#Content, cloud.google.com/vertex-ai/docs/reference/rest/v1/
 * GenerationConfig, .../publishers.models/predict for text embeddings):
 *   request   contents[] {role user|model, parts[] {text | inlineData {mimeType, data} |
 *             fileData {mimeType, fileUri} | functionCall {name, args} | functionResponse
 *             {name, response, parts[] {inlineData | fileData}}}}, systemInstruction {parts},
 *             generationConfig {temperature, topP, topK, maxOutputTokens, stopSequences,
 *             candidateCount, presencePenalty, frequencyPenalty, seed, responseMimeType,
 *             responseSchema}, tools[] {functionDeclarations[] {name, description,
 *             parameters}}, toolConfig {functionCallingConfig {mode AUTO|ANY|NONE,
 *             allowedFunctionNames}}
 *   answer    candidates[] {content {parts}, finishReason, index}, usageMetadata
 *             {promptTokenCount, candidatesTokenCount, thoughtsTokenCount, totalTokenCount},
 *             promptFeedback {blockReason}, responseId; a stream (alt=sse) is a series of such
 *             answers, each with the new parts only, the last with finishReason.
 * OpenAI's side as in translate.c. Parts marked "thought" are reasoning: reasoning_content. */
#include "providers/provider.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sse.h"
#include "tg_err.h"

#define GEMINI_SCHEMA_DEPTH_MAX 32 /* nesting of a JSON schema copied into a request */
#define GEMINI_SCHEMA_NODES_MAX 10000 /* objects and arrays of one, references inlined */

static void set_err(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
}

/* ---- request ---- */

/* A JSON schema copied for Gemini (clean_schema): the schema whose "#/..." references ($ref)
 * resolve, the references being inlined (a cycle cannot be inlined), the objects and arrays
 * made so far (GEMINI_SCHEMA_NODES_MAX: references used many times multiply), and why a copy
 * stopped. */
struct schema_ctx {
    const json_t *root;
    const json_t *inlining[GEMINI_SCHEMA_DEPTH_MAX + 1]; /* the targets being inlined */
    int n_inlining;
    size_t nodes;
    char why[160];
};

static json_t *clean_schema(struct schema_ctx *cx, const json_t *s, int depth);

/* A JSON schema's list of types ("type": ["integer", "null"], as OpenAI's strict mode writes
 * an optional field) set into out the way Gemini's Schema says it, whose type is one value:
 * the one type that is not "null" (more than one: anyOf of each), nullable when "null" is one
 * of them. */
static void clean_type_list(json_t *out, const json_t *types)
{
    json_t *any = json_array();
    const char *one = NULL;
    size_t i, n = 0;
    json_t *t;
    int nullable = 0;

    json_array_foreach(types, i, t)
    {
        const char *ty = json_string_value(t);

        if (ty == NULL)
            continue;
        if (strcmp(ty, "null") == 0) {
            nullable = 1;
            continue;
        }
        one = ty;
        n++;
        json_array_append_new(any, json_pack("{s:s}", "type", ty));
    }
    if (n == 1)
        json_object_set_new(out, "type", json_string(one));
    else if (n > 1)
        json_object_set_new(out, "anyOf", json_incref(any));
    if (nullable)
        json_object_set_new(out, "nullable", json_true());
    json_decref(any);
}

/* properties: each property's schema cleaned, its name kept whatever it is (a parameter may be
 * called "strict", "additionalProperties" or "$ref"). NULL with cx->why. */
static json_t *clean_properties(struct schema_ctx *cx, const json_t *props, int depth)
{
    const char *k;
    json_t *v;
    json_t *out;

    if (!json_is_object(props))
        return clean_schema(cx, props, depth);
    out = json_object();
    json_object_foreach((json_t *)props, k, v)
    {
        json_t *c = clean_schema(cx, v, depth + 1);

        if (c == NULL) {
            json_decref(out);
            return NULL;
        }
        json_object_set_new(out, k, c);
    }
    return out;
}

/* The value a local reference ("#", "#/$defs/Name", "#/definitions/a~1b/0": a JSON pointer,
 * ~0 and ~1 unescaped) points to in root, or NULL. Borrowed from root. */
static const json_t *resolve_ref(const json_t *root, const char *ref)
{
    const json_t *cur = root;
    const char *p = ref + 1;
    char seg[128];

    if (ref[0] != '#')
        return NULL;
    while (*p == '/') {
        size_t n = 0;

        for (p++; *p != '\0' && *p != '/'; p++) {
            char ch = *p;

            if (ch == '~' && (p[1] == '0' || p[1] == '1'))
                ch = *++p == '0' ? '~' : '/';
            if (n + 1 >= sizeof(seg))
                return NULL;
            seg[n++] = ch;
        }
        seg[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);

            cur = end != seg && *end == '\0' ? json_array_get(cur, i) : NULL;
        } else {
            cur = NULL;
        }
        if (cur == NULL)
            return NULL;
    }
    return *p == '\0' ? cur : NULL;
}

/* The schema s's "$ref" inlined: a copy of its target, cleaned. NULL with cx->why when it does
 * not resolve, is cyclic, or the copy stops. */
static json_t *inline_ref(struct schema_ctx *cx, const char *ref, int depth)
{
    const json_t *target = resolve_ref(cx->root, ref);
    json_t *out;

    if (!json_is_object(target)) {
        snprintf(cx->why, sizeof(cx->why),
                 "$ref \"%.64s\" does not point to a schema in this one (Gemini takes no "
                 "references: they are inlined)",
                 ref);
        return NULL;
    }
    for (int i = 0; i < cx->n_inlining; i++) {
        if (cx->inlining[i] == target) {
            snprintf(cx->why, sizeof(cx->why),
                     "$ref \"%.64s\" is recursive: Gemini takes no references and a recursive "
                     "one cannot be inlined",
                     ref);
            return NULL;
        }
    }
    if (cx->n_inlining > GEMINI_SCHEMA_DEPTH_MAX) {
        snprintf(cx->why, sizeof(cx->why), "nested deeper than %d levels, references inlined",
                     GEMINI_SCHEMA_DEPTH_MAX);
        return NULL;
    }
    cx->inlining[cx->n_inlining++] = target;
    out = clean_schema(cx, target, depth + 1);
    cx->n_inlining--;
    return out;
}

/* A copy of a JSON schema as Gemini's Schema takes it: without what it refuses ($schema,
 * additionalProperties, strict, $defs and definitions), references ($ref) inlined (their
 * siblings kept over the target's members), a list of types as one type (clean_type_list),
 * property names as they are. NULL with cx->why past GEMINI_SCHEMA_DEPTH_MAX or
 * GEMINI_SCHEMA_NODES_MAX, for a reference that cannot be inlined, or out of memory. */
static json_t *clean_schema(struct schema_ctx *cx, const json_t *s, int depth)
{
    const char *k;
    json_t *v;
    json_t *out;
    size_t i;

    if (depth > GEMINI_SCHEMA_DEPTH_MAX) {
        snprintf(cx->why, sizeof(cx->why), "nested deeper than %d levels, references inlined",
                     GEMINI_SCHEMA_DEPTH_MAX);
        return NULL;
    }
    if ((json_is_array(s) || json_is_object(s)) && ++cx->nodes > GEMINI_SCHEMA_NODES_MAX) {
        snprintf(cx->why, sizeof(cx->why), "larger than %d objects once its references are inlined",
                 GEMINI_SCHEMA_NODES_MAX);
        return NULL;
    }
    if (json_is_array(s)) {
        out = json_array();
        json_array_foreach(s, i, v)
        {
            json_t *c = clean_schema(cx, v, depth + 1);

            if (c == NULL) {
                json_decref(out);
                return NULL;
            }
            json_array_append_new(out, c);
        }
        return out;
    }
    if (!json_is_object(s))
        return json_deep_copy(s);
    v = json_object_get(s, "$ref");
    if (v != NULL && !json_is_string(v)) {
        snprintf(cx->why, sizeof(cx->why), "$ref: must be a string");
        return NULL;
    }
    out = v != NULL ? inline_ref(cx, json_string_value(v), depth) : json_object();
    if (out == NULL)
        return NULL;
    json_object_foreach((json_t *)s, k, v)
    {
        json_t *c;

        if (strcmp(k, "$schema") == 0 || strcmp(k, "additionalProperties") == 0 ||
            strcmp(k, "strict") == 0 || strcmp(k, "$ref") == 0 || strcmp(k, "$defs") == 0 ||
            strcmp(k, "definitions") == 0)
            continue;
        if (strcmp(k, "type") == 0 && json_is_array(v)) {
            clean_type_list(out, v);
            continue;
        }
        c = strcmp(k, "properties") == 0 ? clean_properties(cx, v, depth + 1)
                                         : clean_schema(cx, v, depth + 1);
        if (c == NULL) {
            json_decref(out);
            return NULL;
        }
        json_object_set_new(out, k, c);
    }
    return out;
}

/* schema as Gemini takes it (clean_schema), or NULL with err naming field. */
static json_t *gemini_schema(const json_t *schema, const char *field, char *err, size_t errlen)
{
    struct schema_ctx cx;
    json_t *out;

    memset(&cx, 0, sizeof(cx));
    cx.root = schema;
    out = clean_schema(&cx, schema, 0);
    if (out == NULL)
        snprintf(err, errlen, "%s: %s", field, cx.why[0] != '\0' ? cx.why : "out of memory");
    return out;
}

/* The MIME type of a file URL by its extension, NULL when unknown. */
static const char *mime_of_url(const char *url)
{
    static const char *const map[][2] = {
        {".png", "image/png"},  {".jpg", "image/jpeg"},  {".jpeg", "image/jpeg"},
        {".gif", "image/gif"},  {".webp", "image/webp"}, {".pdf", "application/pdf"},
        {".mp3", "audio/mpeg"}, {".wav", "audio/wav"},   {".mp4", "video/mp4"},
    };
    const char *end = url + strcspn(url, "?#");
    size_t n = (size_t)(end - url);

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        size_t el = strlen(map[i][0]);

        if (n >= el && strncasecmp(end - el, map[i][0], el) == 0)
            return map[i][1];
    }
    return NULL;
}

/* An image_url part: a data: URL inline, another URL by reference (Gemini fetches gs:// and
 * https:// files itself; Tollgate never fetches on the request path). */
static json_t *image_part(const json_t *image_url, char *err, size_t errlen)
{
    const json_t *u = json_is_object(image_url) ? json_object_get(image_url, "url") : image_url;
    const char *url = json_string_value(u);
    const char *mime;

    if (url == NULL) {
        set_err(err, errlen, "messages: image_url.url must be a string");
        return NULL;
    }
    if (strncmp(url, "data:", 5) == 0) {
        const char *semi = strstr(url, ";base64,");
        const char *comma = strchr(url, ',');

        if (semi == NULL || comma == NULL || comma < semi) {
            set_err(err, errlen, "messages: a data: URL must be base64 (data:<type>;base64,...)");
            return NULL;
        }
        return json_pack("{s:{s:s%,s:s}}", "inlineData", "mimeType", url + 5,
                         (size_t)(semi - url - 5), "data", semi + 8);
    }
    mime = mime_of_url(url);
    if (mime == NULL) {
        set_err(err, errlen,
                "messages: an image URL must be a data: URL or end in .png, .jpg, "
                ".jpeg, .gif, .webp or .pdf");
        return NULL;
    }
    return json_pack("{s:{s:s,s:s}}", "fileData", "mimeType", mime, "fileUri", url);
}

/* A file part (k) as an inlineData part: a PDF given as a data: URL. Its filename goes as
 * inlineData.displayName on Vertex AI; the Gemini API refuses that field ("displayName parameter
 * is not supported in Gemini API"), so there it is left out. New or NULL with err. */
static json_t *pdf_part(const json_t *file, size_t k, int vertex, char *err, size_t errlen)
{
    const char *data, *filename;
    json_t *p;

    if (rt_dialect_pdf(file, k, &data, &filename, err, errlen) != 0)
        return NULL;
    p = json_pack("{s:{s:s,s:s}}", "inlineData", "mimeType", "application/pdf", "data", data);
    if (p != NULL && vertex && filename != NULL)
        json_object_set_new(json_object_get(p, "inlineData"), "displayName",
                            json_string(filename));
    return p;
}

static json_t *file_part(const json_t *file, size_t k, char *err, size_t errlen)
{
    return pdf_part(file, k, 0, err, errlen);
}

static json_t *file_part_vertex(const json_t *file, size_t k, char *err, size_t errlen)
{
    return pdf_part(file, k, 1, err, errlen);
}

/* The media of tool message i as functionResponse.parts (FunctionResponsePart: inlineData
 * {mimeType, data} or fileData {mimeType, fileUri}; Gemini 3's multimodal function responses):
 * image_url parts (a data: URL inline, another URL by reference on Vertex AI only: the Gemini
 * API takes no fileData there) and PDF file parts. Set in *media (new array, NULL when the
 * result is text only). A part of another type is refused naming it. 0, or TG_EINVAL with err. */
static int tool_media(const json_t *raw, size_t i, int vertex, json_t **media, char *err,
                      size_t errlen)
{
    size_t k;
    const json_t *p;

    *media = NULL;
    json_array_foreach(raw, k, p)
    {
        const char *t = json_string_value(json_object_get(p, "type"));
        json_t *part = NULL;

        if (t != NULL && strcmp(t, "text") == 0 && json_is_string(json_object_get(p, "text")))
            continue;
        if (t != NULL && strcmp(t, "image_url") == 0) {
            const json_t *iu = json_object_get(p, "image_url");
            const char *url = json_string_value(json_is_object(iu) ? json_object_get(iu, "url")
                                                                   : iu);

            if (!vertex && url != NULL && strncmp(url, "data:", 5) != 0) {
                snprintf(err, errlen,
                         "messages[%zu].content[%zu].image_url.url: the Gemini API takes an image "
                         "in a tool result inline only (a data: URL), not by URL",
                         i, k);
                goto fail;
            }
            part = image_part(iu, err, errlen);
        } else if (t != NULL && strcmp(t, "file") == 0) {
            part = pdf_part(json_object_get(p, "file"), k, vertex, err, errlen);
        } else {
            snprintf(err, errlen,
                     "messages[%zu].content[%zu]: a tool result's \"%.32s\" part cannot be "
                     "translated: Gemini's functionResponse takes text, images and PDFs",
                     i, k, t != NULL ? t : "(none)");
            goto fail;
        }
        if (part == NULL)
            goto fail;
        if (*media == NULL)
            *media = json_array();
        json_array_append_new(*media, part);
    }
    return 0;
fail:
    json_decref(*media);
    *media = NULL;
    return TG_EINVAL;
}

/* functionResponse.response from the text of tool message i: the JSON object its text is,
 * else {"content": text}; a result marked as an error (RT_TRANSLATE_TOOL_ERROR_MARK) as
 * {"error": the object or the text}, the key Google's reference gives for a failed call. Its
 * images and PDFs in *media (tool_media). New, or NULL with err. */
static json_t *tool_result(const json_t *m, size_t i, int vertex, json_t **media, char *err,
                           size_t errlen)
{
    const json_t *raw = json_object_get(m, "content");
    json_t *content = NULL, *j = NULL, *p;
    const char *text = NULL;
    char *joined = NULL;
    int is_error = 0;
    size_t k, n = 0;

    if (tool_media(raw, i, vertex, media, err, errlen) != 0)
        return NULL;
    content = rt_dialect_tool_content(raw, &is_error);
    if (content == NULL) {
        json_decref(*media);
        *media = NULL;
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    text = json_string_value(content);
    if (json_is_array(content)) {
        /* text parts joined (the media go as parts) */
        json_array_foreach(content, k, p)
        {
            n += json_string_length(json_object_get(p, "text"));
        }
        joined = calloc(1, n + 1);
        if (joined != NULL) {
            n = 0;
            json_array_foreach(content, k, p)
            {
                const json_t *t = json_object_get(p, "text");

                if (!json_is_string(t))
                    continue;
                memcpy(joined + n, json_string_value(t), json_string_length(t));
                n += json_string_length(t);
            }
        }
        text = joined;
    }
    if (text != NULL)
        j = json_loads(text, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        j = json_string(text != NULL ? text : "");
        if (!is_error)
            j = json_pack("{s:o}", "content", j);
    }
    if (is_error)
        j = json_pack("{s:o}", "error", j);
    free(joined);
    json_decref(content);
    if (j == NULL) {
        json_decref(*media);
        *media = NULL;
        set_err(err, errlen, "out of memory");
    }
    return j;
}

static int set_tool_config(json_t *body, const json_t *choice, char *err, size_t errlen)
{
    const char *s = json_string_value(choice);
    json_t *fcc;

    if (choice == NULL || json_is_null(choice))
        return 0;
    if (s != NULL) {
        const char *mode = strcmp(s, "none") == 0       ? "NONE"
                           : strcmp(s, "auto") == 0     ? "AUTO"
                           : strcmp(s, "required") == 0 ? "ANY"
                                                        : NULL;

        if (mode == NULL) {
            set_err(err, errlen, "tool_choice: expected none, auto, required or a function");
            return TG_EINVAL;
        }
        fcc = json_pack("{s:s}", "mode", mode);
    } else {
        const char *name =
            json_string_value(json_object_get(json_object_get(choice, "function"), "name"));

        if (name == NULL) {
            set_err(err, errlen, "tool_choice: a function needs a name");
            return TG_EINVAL;
        }
        fcc = json_pack("{s:s,s:[s]}", "mode", "ANY", "allowedFunctionNames", name);
    }
    json_object_set_new(body, "toolConfig", json_pack("{s:o}", "functionCallingConfig", fcc));
    return 0;
}

static int set_tools(json_t *body, const json_t *tools, char *err, size_t errlen)
{
    json_t *decls;
    size_t i;
    json_t *t;

    if (tools == NULL || json_is_null(tools))
        return 0;
    if (!json_is_array(tools)) {
        set_err(err, errlen, "tools: expected an array");
        return TG_EINVAL;
    }
    if (json_array_size(tools) == 0)
        return 0;
    decls = json_array();
    json_array_foreach(tools, i, t)
    {
        const json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        const json_t *params = json_object_get(fn, "parameters");
        json_t *d;

        if (name == NULL) {
            json_decref(decls);
            set_err(err, errlen, "tools: each tool needs function.name");
            return TG_EINVAL;
        }
        d = json_pack("{s:s}", "name", name);
        if (json_is_string(json_object_get(fn, "description")))
            json_object_set(d, "description", json_object_get(fn, "description"));
        if (json_is_object(params)) {
            char field[64];
            json_t *c;

            snprintf(field, sizeof(field), "tools[%zu].function.parameters", i);
            c = gemini_schema(params, field, err, errlen);
            if (c == NULL) {
                json_decref(d);
                json_decref(decls);
                return TG_EINVAL;
            }
            json_object_set_new(d, "parameters", c);
        }
        json_array_append_new(decls, d);
    }
    json_object_set_new(body, "tools", json_pack("[{s:o}]", "functionDeclarations", decls));
    return 0;
}

static int set_generation_config(json_t *body, const json_t *chat, char *err, size_t errlen)
{
    static const char *const same[][2] = {
        {"temperature", "temperature"},
        {"top_p", "topP"},
        {"top_k", "topK"},
        {"n", "candidateCount"},
        {"presence_penalty", "presencePenalty"},
        {"frequency_penalty", "frequencyPenalty"},
        {"seed", "seed"},
    };
    json_t *gc = json_object();
    const json_t *v;

    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        v = json_object_get(chat, same[i][0]);
        if (json_is_number(v))
            json_object_set(gc, same[i][1], (json_t *)v);
    }
    v = json_object_get(chat, "max_completion_tokens");
    if (!json_is_integer(v))
        v = json_object_get(chat, "max_tokens");
    if (json_is_integer(v))
        json_object_set(gc, "maxOutputTokens", (json_t *)v);
    v = json_object_get(chat, "stop");
    if (json_is_string(v))
        json_object_set_new(gc, "stopSequences", json_pack("[O]", v));
    else if (json_is_array(v) && json_array_size(v) > 0)
        json_object_set(gc, "stopSequences", (json_t *)v);
    v = json_object_get(chat, "response_format");
    if (json_is_object(v)) {
        const char *type = json_string_value(json_object_get(v, "type"));

        if (type != NULL && (strcmp(type, "json_object") == 0 || strcmp(type, "json_schema") == 0))
            json_object_set_new(gc, "responseMimeType", json_string("application/json"));
        if (type != NULL && strcmp(type, "json_schema") == 0) {
            const json_t *schema = json_object_get(json_object_get(v, "json_schema"), "schema");

            if (json_is_object(schema)) {
                json_t *c = gemini_schema(schema, "response_format.json_schema.schema", err,
                                          errlen);

                if (c == NULL) {
                    json_decref(gc);
                    return TG_EINVAL;
                }
                json_object_set_new(gc, "responseSchema", c);
            }
        }
    }
    if (json_object_size(gc) > 0)
        json_object_set_new(body, "generationConfig", gc);
    else
        json_decref(gc);
    return 0;
}

/* The name of the tool call id in the assistant turns seen so far (ids: id -> name). */
static const char *call_name(const json_t *ids, const json_t *m)
{
    const char *id = json_string_value(json_object_get(m, "tool_call_id"));
    const char *name = id != NULL ? json_string_value(json_object_get(ids, id)) : NULL;

    if (name == NULL)
        name = json_string_value(json_object_get(m, "name"));
    return name != NULL ? name : "tool";
}

/* vertex: Vertex AI's dialect, which takes a few fields the Gemini API refuses (file URLs in
 * tool results, a PDF's displayName). */
static json_t *request_of(const json_t *chat, int vertex, char *err, size_t errlen)
{
    const json_t *msgs;
    json_t *body = NULL, *contents = json_array(), *sys = json_array(), *ids = json_object();
    json_t *last_tool = NULL; /* the user turn collecting consecutive tool results */
    size_t i;
    json_t *m;

    msgs = rt_dialect_messages(chat, sys, image_part, 0, err, errlen);
    if (msgs == NULL)
        goto fail;
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *content = json_object_get(m, "content");
        json_t *parts;

        if (rt_dialect_is_system(role))
            continue;
        if (strcmp(role, "tool") == 0 || strcmp(role, "function") == 0) {
            json_t *media = NULL;
            json_t *res = tool_result(m, i, vertex, &media, err, errlen);
            json_t *fr;

            if (res == NULL)
                goto fail;
            fr = json_pack("{s:{s:s,s:o}}", "functionResponse", "name", call_name(ids, m),
                           "response", res);
            if (fr != NULL && media != NULL)
                json_object_set_new(json_object_get(fr, "functionResponse"), "parts", media);
            else
                json_decref(media);

            if (last_tool == NULL) {
                last_tool = json_pack("{s:s,s:[]}", "role", "user", "parts");
                json_array_append_new(contents, last_tool); /* borrowed from here on */
            }
            json_array_append_new(json_object_get(last_tool, "parts"), fr);
            continue;
        }
        last_tool = NULL;
        parts = json_array();
        if (rt_dialect_content(content, parts, image_part,
                               strcmp(role, "user") != 0 ? NULL
                               : vertex                  ? file_part_vertex
                                                         : file_part,
                               0, err,
                               errlen) != 0) {
            json_decref(parts);
            goto fail;
        }
        if (strcmp(role, "assistant") == 0) {
            const json_t *calls = json_object_get(m, "tool_calls");
            size_t k;
            json_t *tc;

            json_array_foreach(calls, k, tc)
            {
                const json_t *fn = json_object_get(tc, "function");
                const char *name = json_string_value(json_object_get(fn, "name"));
                const char *id = json_string_value(json_object_get(tc, "id"));

                if (name == NULL) {
                    json_decref(parts);
                    set_err(err, errlen, "messages: a tool call needs function.name");
                    goto fail;
                }
                if (id != NULL)
                    json_object_set_new(ids, id, json_string(name));
                json_array_append_new(parts, json_pack("{s:{s:s,s:o}}", "functionCall", "name",
                                                       name, "args", rt_dialect_call_args(fn)));
            }
            json_array_append_new(contents,
                                  json_pack("{s:s,s:o}", "role", "model", "parts", parts));
        } else if (strcmp(role, "user") == 0) {
            json_array_append_new(contents, json_pack("{s:s,s:o}", "role", "user", "parts", parts));
        } else {
            json_decref(parts);
            snprintf(err, errlen, "messages: role \"%.32s\" is not supported", role);
            goto fail;
        }
    }
    if (json_array_size(contents) == 0) {
        set_err(err, errlen, "messages: at least one user message is required");
        goto fail;
    }
    body = json_pack("{s:O}", "contents", contents);
    if (json_array_size(sys) > 0)
        json_object_set_new(body, "systemInstruction", json_pack("{s:O}", "parts", sys));
    if (set_generation_config(body, chat, err, errlen) != 0 ||
        set_tools(body, json_object_get(chat, "tools"), err, errlen) != 0 ||
        set_tool_config(body, json_object_get(chat, "tool_choice"), err, errlen) != 0) {
        json_decref(body);
        body = NULL;
    }
fail:
    json_decref(contents);
    json_decref(sys);
    json_decref(ids);
    return body;
}

static json_t *gemini_request(const json_t *chat, const struct rt_deployment_conf *dep, int stream,
                              char *err, size_t errlen)
{
    (void)dep;
    (void)stream;
    return request_of(chat, 0, err, errlen);
}

static json_t *vertex_gemini_request(const json_t *chat, const struct rt_deployment_conf *dep,
                                     int stream, char *err, size_t errlen)
{
    (void)dep;
    (void)stream;
    return request_of(chat, 1, err, errlen);
}

/* ---- answers ---- */

static const char *finish_of(const char *r)
{
    if (r == NULL)
        return NULL;
    if (strcmp(r, "STOP") == 0)
        return "stop";
    if (strcmp(r, "MAX_TOKENS") == 0)
        return "length";
    if (strcmp(r, "SAFETY") == 0 || strcmp(r, "RECITATION") == 0 || strcmp(r, "BLOCKLIST") == 0 ||
        strcmp(r, "PROHIBITED_CONTENT") == 0 || strcmp(r, "SPII") == 0 ||
        strcmp(r, "IMAGE_SAFETY") == 0 || strcmp(r, "LANGUAGE") == 0)
        return "content_filter";
    return "stop";
}

/* What makes the tool call ids of one answer unique across a conversation (Gemini has no call
 * ids: "call_0" in every turn let a client that matches results by id mix up turns): the
 * answer's responseId, its characters outside [A-Za-z0-9_-] left out (ids go on to Anthropic,
 * whose tool_use ids take those only), at most GEMINI_CALL_PREFIX_MAX of them; without one, the
 * clock and a process-wide counter. Into dst (cap bytes). Any thread. */
#define GEMINI_CALL_PREFIX_MAX 40

static void call_prefix(const json_t *answer, char *dst, size_t cap)
{
    static atomic_uint_fast64_t counter;
    const char *rid = json_string_value(json_object_get(answer, "responseId"));
    size_t n = 0;

    for (; rid != NULL && *rid != '\0' && n < GEMINI_CALL_PREFIX_MAX && n + 1 < cap; rid++) {
        char ch = *rid;

        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '_' || ch == '-')
            dst[n++] = ch;
    }
    dst[n] = '\0';
    if (n == 0)
        snprintf(dst, cap, "%llx%llx", (unsigned long long)time(NULL),
                 (unsigned long long)atomic_fetch_add(&counter, 1));
}

/* The parts of one candidate: text, reasoning and tool calls (ids call_<prefix>_<first + k>:
 * see call_prefix). */
struct parts_out {
    json_t *text;      /* string or NULL */
    json_t *reasoning; /* string or NULL */
    json_t *calls;     /* array (maybe empty) */
};

static int read_parts(const json_t *parts, const char *prefix, int first_call,
                      struct parts_out *o)
{
    size_t i, tl = 0, rl = 0;
    json_t *p;
    char *text = NULL, *reas = NULL;

    o->text = o->reasoning = NULL;
    o->calls = json_array();
    if (parts != NULL && !json_is_array(parts))
        return TG_EPROTO;
    json_array_foreach(parts, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "text"));
        const json_t *fc = json_object_get(p, "functionCall");

        if (t != NULL) {
            int thought = json_is_true(json_object_get(p, "thought"));
            char **dst = thought ? &reas : &text;
            size_t *len = thought ? &rl : &tl;
            size_t n = strlen(t);
            char *nb = realloc(*dst, *len + n + 1);

            if (nb == NULL)
                break;
            memcpy(nb + *len, t, n + 1);
            *dst = nb;
            *len += n;
        } else if (json_is_object(fc)) {
            const char *name = json_string_value(json_object_get(fc, "name"));
            const json_t *args = json_object_get(fc, "args");
            char *a = json_is_object(args) ? json_dumps(args, JSON_COMPACT) : strdup("{}");
            char id[64];

            if (name == NULL || a == NULL) {
                free(a);
                free(text);
                free(reas);
                return TG_EPROTO;
            }
            snprintf(id, sizeof(id), "call_%.*s_%d", GEMINI_CALL_PREFIX_MAX, prefix,
                     first_call + (int)json_array_size(o->calls));
            json_array_append_new(o->calls,
                                  json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                            "function", "name", name, "arguments", a));
            free(a);
        }
    }
    if (text != NULL)
        o->text = json_stringn(text, tl);
    if (reas != NULL)
        o->reasoning = json_stringn(reas, rl);
    free(text);
    free(reas);
    return 0;
}

static json_t *gemini_response(const json_t *answer, const char *model, char *err, size_t errlen)
{
    const json_t *cands = json_object_get(answer, "candidates");
    const json_t *um = json_object_get(answer, "usageMetadata");
    const char *rid = json_string_value(json_object_get(answer, "responseId"));
    json_t *choices;
    size_t i;
    json_t *c;
    char id[96], prefix[GEMINI_CALL_PREFIX_MAX + 1];
    int64_t prompt, completion;

    if (!json_is_object(answer) || (cands != NULL && !json_is_array(cands))) {
        set_err(err, errlen, "the provider's answer is not a generateContent response");
        return NULL;
    }
    call_prefix(answer, prefix, sizeof(prefix));
    choices = json_array();
    json_array_foreach(cands, i, c)
    {
        struct parts_out po;
        const char *finish = finish_of(json_string_value(json_object_get(c, "finishReason")));
        json_t *msg;
        const json_t *idx = json_object_get(c, "index");

        if (read_parts(json_object_get(json_object_get(c, "content"), "parts"), prefix, 0, &po) !=
            0) {
            json_decref(po.calls);
            json_decref(choices);
            set_err(err, errlen, "the provider's answer has a malformed part");
            return NULL;
        }
        msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                        po.text != NULL ? po.text : json_null());
        if (po.reasoning != NULL)
            json_object_set_new(msg, "reasoning_content", po.reasoning);
        if (json_array_size(po.calls) > 0) {
            json_object_set_new(msg, "tool_calls", po.calls);
            if (finish == NULL || strcmp(finish, "stop") == 0)
                finish = "tool_calls";
        } else {
            json_decref(po.calls);
        }
        json_array_append_new(
            choices, json_pack("{s:I,s:o,s:s}", "index",
                               json_is_integer(idx) ? json_integer_value(idx) : (json_int_t)i,
                               "message", msg, "finish_reason", finish != NULL ? finish : "stop"));
    }
    if (json_array_size(choices) == 0) {
        /* a prompt refused before any candidate (promptFeedback.blockReason) */
        json_array_append_new(choices,
                              json_pack("{s:i,s:{s:s,s:n},s:s}", "index", 0, "message", "role",
                                        "assistant", "content", "finish_reason", "content_filter"));
    }
    prompt = rt_dialect_count(um, "promptTokenCount");
    completion =
        rt_dialect_count(um, "candidatesTokenCount") + rt_dialect_count(um, "thoughtsTokenCount");
    snprintf(id, sizeof(id), "chatcmpl-%.80s", rid != NULL ? rid : "gemini");
    return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", id, "object", "chat.completion", "created",
                     (json_int_t)time(NULL), "model", model, "choices", choices, "usage",
                     rt_dialect_usage(prompt, rt_dialect_count(um, "cachedContentTokenCount"), 0,
                                      completion, rt_dialect_count(um, "thoughtsTokenCount")));
}

/* ---- streams ---- */

static int gemini_stream_event(struct rt_dialect_stream *st, const char *raw, size_t len,
                               struct tg_buf *out)
{
    char event[32];
    char *data = malloc(len + 1);
    size_t dlen = 0;
    json_t *j = NULL;
    const json_t *cand, *um;
    struct parts_out po = {NULL, NULL, NULL};
    json_t *delta;
    const char *fr;
    int rc = 0;

    if (data == NULL)
        return TG_ENOMEM;
    rt_sse_parse(raw, len, event, sizeof(event), data, len + 1, &dlen);
    if (dlen == 0) {
        free(data); /* a comment or an empty event */
        return 0;
    }
    j = json_loadb(data, dlen, 0, NULL);
    free(data);
    if (!json_is_object(j) || json_object_get(j, "error") != NULL) {
        json_decref(j);
        return TG_EPROTO;
    }
    cand = json_array_get(json_object_get(j, "candidates"), 0);
    um = json_object_get(j, "usageMetadata");
    if (json_is_object(um)) {
        st->prompt_tokens = rt_dialect_count(um, "promptTokenCount");
        st->cache_read_tokens = rt_dialect_count(um, "cachedContentTokenCount");
        st->completion_tokens = rt_dialect_count(um, "candidatesTokenCount") +
                                rt_dialect_count(um, "thoughtsTokenCount");
        st->reasoning_tokens = rt_dialect_count(um, "thoughtsTokenCount");
        st->usage_found = 1;
    }
    if (cand == NULL) {
        if (json_object_get(json_object_get(j, "promptFeedback"), "blockReason") != NULL) {
            snprintf(st->finish, sizeof(st->finish), "content_filter");
            st->finished = 1;
        }
        json_decref(j);
        return 0;
    }
    if (st->call_prefix[0] == '\0')
        call_prefix(j, st->call_prefix, sizeof(st->call_prefix));
    if (read_parts(json_object_get(json_object_get(cand, "content"), "parts"), st->call_prefix,
                   st->n_tools, &po) != 0) {
        json_decref(po.calls);
        json_decref(j);
        return TG_EPROTO;
    }
    delta = json_object();
    if (po.text != NULL)
        json_object_set_new(delta, "content", po.text);
    if (po.reasoning != NULL)
        json_object_set_new(delta, "reasoning_content", po.reasoning);
    if (json_array_size(po.calls) > 0) {
        size_t k;
        json_t *tc;

        json_array_foreach(po.calls, k, tc)
        {
            json_object_set_new(tc, "index", json_integer(st->n_tools));
            st->n_tools++;
        }
        json_object_set(delta, "tool_calls", po.calls);
    }
    json_decref(po.calls);
    if (json_object_size(delta) > 0)
        rc = rt_dialect_chunk(st, delta, NULL, out);
    else
        json_decref(delta);
    fr = json_string_value(json_object_get(cand, "finishReason"));
    if (fr != NULL) {
        const char *f = finish_of(fr);

        if (st->n_tools > 0 && strcmp(f, "stop") == 0)
            f = "tool_calls";
        snprintf(st->finish, sizeof(st->finish), "%s", f);
        st->finished = 1;
    }
    json_decref(j);
    return rc;
}

/* ---- embeddings ---- */

/* The input strings of an OpenAI embeddings request (string or array of strings). */
static const json_t *embed_inputs(const json_t *req, json_t **owned, char *err, size_t errlen)
{
    const json_t *in = json_object_get(req, "input");
    size_t i;
    json_t *v;

    *owned = NULL;
    if (json_is_string(in)) {
        *owned = json_pack("[O]", in);
        return *owned;
    }
    if (!json_is_array(in) || json_array_size(in) == 0) {
        set_err(err, errlen, "input: a string or a non-empty array of strings is required");
        return NULL;
    }
    json_array_foreach(in, i, v)
    {
        if (!json_is_string(v)) {
            set_err(err, errlen, "input: token arrays are not supported by this provider");
            return NULL;
        }
    }
    return in;
}

static json_t *gemini_embed_request(const json_t *req, const struct rt_deployment_conf *dep,
                                    char *err, size_t errlen)
{
    json_t *owned;
    const json_t *in = embed_inputs(req, &owned, err, errlen);
    const json_t *dims = json_object_get(req, "dimensions");
    json_t *reqs;
    char model[RT_NAME_CAP + 8];
    size_t i;
    json_t *v;

    if (in == NULL)
        return NULL;
    snprintf(model, sizeof(model), "models/%s", dep->model);
    reqs = json_array();
    json_array_foreach(in, i, v)
    {
        json_t *r = json_pack("{s:s,s:{s:[{s:O}]}}", "model", model, "content", "parts", "text", v);

        if (json_is_integer(dims))
            json_object_set(r, "outputDimensionality", (json_t *)dims);
        json_array_append_new(reqs, r);
    }
    json_decref(owned);
    return json_pack("{s:o}", "requests", reqs);
}

static json_t *embed_list(json_t *data, const char *model, int64_t tokens)
{
    return json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model", model,
                     "usage", "prompt_tokens", (json_int_t)tokens, "total_tokens",
                     (json_int_t)tokens);
}

static json_t *gemini_embed_response(const json_t *answer, const char *model, char *err,
                                     size_t errlen)
{
    const json_t *embs = json_object_get(answer, "embeddings");
    json_t *data;
    size_t i;
    json_t *e;

    if (!json_is_array(embs)) {
        set_err(err, errlen, "the provider's answer has no embeddings");
        return NULL;
    }
    data = json_array();
    json_array_foreach(embs, i, e)
    {
        const json_t *vals = json_object_get(e, "values");

        if (!json_is_array(vals)) {
            json_decref(data);
            set_err(err, errlen, "the provider's answer has an embedding without values");
            return NULL;
        }
        json_array_append_new(data, json_pack("{s:s,s:I,s:O}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", vals));
    }
    /* the Gemini API reports no token count for embeddings */
    return embed_list(data, model, 0);
}

/* Vertex AI text embeddings: predict {instances: [{content}], parameters} -> predictions[]
 * {embeddings {values, statistics {token_count}}}. */
static json_t *vertex_embed_request(const json_t *req, const struct rt_deployment_conf *dep,
                                    char *err, size_t errlen)
{
    json_t *owned;
    const json_t *in = embed_inputs(req, &owned, err, errlen);
    const json_t *dims = json_object_get(req, "dimensions");
    json_t *inst, *body;
    size_t i;
    json_t *v;

    (void)dep;
    if (in == NULL)
        return NULL;
    inst = json_array();
    json_array_foreach(in, i, v)
    {
        json_array_append_new(inst, json_pack("{s:O}", "content", v));
    }
    json_decref(owned);
    body = json_pack("{s:o}", "instances", inst);
    if (json_is_integer(dims))
        json_object_set_new(body, "parameters", json_pack("{s:O}", "outputDimensionality", dims));
    return body;
}

static json_t *vertex_embed_response(const json_t *answer, const char *model, char *err,
                                     size_t errlen)
{
    const json_t *preds = json_object_get(answer, "predictions");
    json_t *data;
    int64_t tokens = 0;
    size_t i;
    json_t *p;

    if (!json_is_array(preds)) {
        set_err(err, errlen, "the provider's answer has no predictions");
        return NULL;
    }
    data = json_array();
    json_array_foreach(preds, i, p)
    {
        const json_t *e = json_object_get(p, "embeddings");
        const json_t *vals = json_object_get(e, "values");

        if (!json_is_array(vals)) {
            json_decref(data);
            set_err(err, errlen, "the provider's answer has a prediction without values");
            return NULL;
        }
        tokens += rt_dialect_count(json_object_get(e, "statistics"), "token_count");
        json_array_append_new(data, json_pack("{s:s,s:I,s:O}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding", vals));
    }
    return embed_list(data, model, tokens);
}

const struct rt_dialect rt_dialect_gemini = {
    .request = gemini_request,
    .response = gemini_response,
    .embed_request = gemini_embed_request,
    .embed_response = gemini_embed_response,
    .event_len = NULL,
    .stream_event = gemini_stream_event,
    .stream_end = rt_dialect_stream_close,
};

const struct rt_dialect rt_dialect_vertex_gemini = {
    .request = vertex_gemini_request,
    .response = gemini_response,
    .embed_request = vertex_embed_request,
    .embed_response = vertex_embed_response,
    .event_len = NULL,
    .stream_event = gemini_stream_event,
    .stream_end = rt_dialect_stream_close,
};
