module vkc

go 1.26.8

require (
	github.com/emicklei/dot v1.6.2 // indirect
	github.com/goki/vulkan v1.0.8 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
