/* nvme_config_init: the tables, the nvmet.* and share.nvme.* methods, the
 * dataset hooks and the CONF_NVME subscriber (nvme_config.h). */
#include "nvme/config/nvme_config.h"

#include "api/api.h"
#include "nvme/config/nvmet_internal.h"

void nvme_config_init(void)
{
    nvs_init();
    api_register(nvmet_global_methods, nvmet_global_methods_n);
    api_register(nvmet_subsys_methods, nvmet_subsys_methods_n);
    api_register(nvmet_namespace_methods, nvmet_namespace_methods_n);
    api_register(nvmet_port_methods, nvmet_port_methods_n);
    api_register(nvmet_host_methods, nvmet_host_methods_n);
    api_register(nvmet_link_methods, nvmet_link_methods_n);
    api_register(nvmet_share_methods, nvmet_share_methods_n);
    nvmet_datasets_init();
    nvmet_resv_init();
    nvmet_publish_init();
}
