/* signing_bench: the CPU a request spends on provider authentication, per operation, measured
 * with the process CPU clock in one run:
 *   - Bedrock: SigV4 over a 2 KiB body (the body's SHA-256, the canonical request, the key
 *     chain, the signature) through the provider's headers(), as every attempt pays it;
 *   - Vertex AI: one RS256 JWT for the token endpoint (RSA-2048), paid once per token renewal
 *     on the credentials thread (about once per 55 minutes per deployment), never per request;
 *   - for scale: an OpenAI-compatible bearer header.
 *
 *   signing_bench [ITERATIONS]   prints one markdown table */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "config.h"
#include "providers/provider.h"

static double cpu_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    static struct rt_deployment_conf d;
    static struct rt_dep_cloud c;
    static char hdr[RT_PROVIDER_HEADERS_MAX][RT_PROVIDER_HEADER_CAP];
    char url[RT_PROVIDER_URL_CAP];
    char *body = malloc(2048);
    char jwt[4096], err[256];
    struct rt_provider_attempt a;
    EVP_PKEY *k = EVP_RSA_gen(2048);
    BIO *b = BIO_new(BIO_s_mem());
    double t0, sig_us, jwt_us, bearer_us;
    long jn = n / 20 > 0 ? n / 20 : 1;
    int len;

    if (body == NULL || k == NULL || b == NULL ||
        PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) != 1)
        return 1;
    len = BIO_read(b, c.sa_private_key, sizeof(c.sa_private_key) - 1);
    c.sa_private_key[len > 0 ? len : 0] = '\0';
    memset(body, 'x', 2048);
    snprintf(c.aws_access_key_id, sizeof(c.aws_access_key_id), "AKIABENCH");
    snprintf(c.aws_secret_access_key, sizeof(c.aws_secret_access_key), "secret/bench");
    snprintf(c.aws_region_name, sizeof(c.aws_region_name), "us-east-1");
    snprintf(c.sa_client_email, sizeof(c.sa_client_email), "svc@p.iam.gserviceaccount.com");
    snprintf(c.sa_token_uri, sizeof(c.sa_token_uri), "https://oauth2.googleapis.com/token");
    snprintf(d.model, sizeof(d.model), "anthropic.claude-3-5-sonnet-20240620-v1:0");
    snprintf(d.api_base, sizeof(d.api_base), "https://bedrock-runtime.us-east-1.amazonaws.com");
    snprintf(d.api_key, sizeof(d.api_key), "sk-bench");
    d.cloud = &c;
    d.prov = &rt_provider_bedrock;
    memset(&a, 0, sizeof(a));
    a.dep = &d;
    a.wire = RT_API_CHAT;
    a.body = body;
    a.body_len = 2048;
    a.now_s = (int64_t)time(NULL);
    rt_provider_bedrock.url(&a, url, sizeof(url));

    t0 = cpu_s();
    for (long i = 0; i < n; i++) {
        if (rt_provider_bedrock.headers(&a, url, hdr) != 2)
            return 1;
    }
    sig_us = (cpu_s() - t0) / (double)n * 1e6;
    t0 = cpu_s();
    for (long i = 0; i < jn; i++) {
        if (rt_google_jwt(&c, a.now_s, jwt, sizeof(jwt), err, sizeof(err)) != 0)
            return 1;
    }
    jwt_us = (cpu_s() - t0) / (double)jn * 1e6;
    d.prov = &rt_provider_openai;
    t0 = cpu_s();
    for (long i = 0; i < n; i++) {
        if (rt_openai_headers(&a, url, hdr) != 1)
            return 1;
    }
    bearer_us = (cpu_s() - t0) / (double)n * 1e6;
    printf("| operation | CPU per operation | runs |\n|---|---|---|\n");
    printf("| Bedrock SigV4 headers (2 KiB body) | %.1f us | %ld |\n", sig_us, n);
    printf("| Vertex AI RS256 JWT (RSA-2048, per token renewal) | %.1f us | %ld |\n", jwt_us, jn);
    printf("| OpenAI-compatible bearer header | %.2f us | %ld |\n", bearer_us, n);
    BIO_free(b);
    EVP_PKEY_free(k);
    free(body);
    return 0;
}
