/* The TrueNAS coverage section of docs/api.md (api_coverage.c). */
#ifndef BLOCKD_CLI_API_COVERAGE_H
#define BLOCKD_CLI_API_COVERAGE_H

extern const char cli_api_coverage_md[];

#endif
