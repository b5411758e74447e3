// A fake libcuda: every call succeeds and does as little as possible, so
// that a host program's own time can be measured without a GPU.
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
typedef int CUresult;
typedef unsigned long long u64;
static int ctx_dummy, dev_dummy;
static void *current = 0;
CUresult cuInit(unsigned f){return 0;}
CUresult cuDriverGetVersion(int *v){*v=13000;return 0;}
CUresult cuDeviceGetCount(int *c){*c=1;return 0;}
CUresult cuDeviceGet(int *d,int o){*d=o;return 0;}
CUresult cuDeviceGetName(char *n,int len,int d){strncpy(n,"Stub",len);return 0;}
CUresult cuDeviceTotalMem_v2(size_t *b,int d){*b=(size_t)80<<30;return 0;}
CUresult cuDeviceGetAttribute(int *v,int a,int d){
  switch(a){case 16:*v=132;break; /* MULTIPROCESSOR_COUNT */
  case 75:*v=9;break; case 76:*v=0;break; /* CC major/minor */
  case 1:*v=1024;break; case 39:*v=2048;break; case 82:*v=65536;break;
  default:*v=1;}
  return 0;}
CUresult cuDevicePrimaryCtxRetain(void **c,int d){*c=&ctx_dummy;return 0;}
CUresult cuDevicePrimaryCtxRelease_v2(int d){return 0;}
CUresult cuCtxSetCurrent(void *c){current=c;return 0;}
CUresult cuCtxGetCurrent(void **c){*c=current;return 0;}
CUresult cuCtxSynchronize(void){return 0;}
CUresult cuCtxGetDevice(int *d){*d=0;return 0;}
CUresult cuStreamCreate(void **s,unsigned f){*s=malloc(8);return 0;}
CUresult cuStreamCreateWithPriority(void **s,unsigned f,int p){*s=malloc(8);return 0;}
CUresult cuStreamDestroy_v2(void *s){return 0;}
CUresult cuStreamSynchronize(void *s){return 0;}
CUresult cuStreamWaitEvent(void *s,void *e,unsigned f){return 0;}
CUresult cuEventCreate(void **e,unsigned f){*e=malloc(8);return 0;}
CUresult cuEventRecord(void *e,void *s){return 0;}
CUresult cuEventSynchronize(void *e){return 0;}
CUresult cuEventDestroy_v2(void *e){return 0;}
CUresult cuEventElapsedTime(float *ms,void *a,void *b){*ms=0.001f;return 0;}
CUresult cuEventElapsedTime_v2(float *ms,void *a,void *b){*ms=0.001f;return 0;}
CUresult cuEventQuery(void *e){return 0;}
CUresult cuMemAlloc_v2(u64 *p,size_t b){*p=(u64)calloc(1,b?b:1);return 0;}
CUresult cuMemAllocAsync(u64 *p,size_t b,void *s){*p=(u64)calloc(1,b?b:1);return 0;}
CUresult cuMemFree_v2(u64 p){return 0;}
CUresult cuMemFreeAsync(u64 p,void *s){return 0;}
CUresult cuMemHostAlloc(void **p,size_t b,unsigned f){*p=calloc(1,b);return 0;}
CUresult cuMemFreeHost(void *p){return 0;}
CUresult cuMemHostGetDevicePointer_v2(u64 *d,void *p,unsigned f){*d=(u64)p;return 0;}
CUresult cuMemcpyHtoD_v2(u64 d,const void *h,size_t b){memcpy((void*)d,h,b);return 0;}
CUresult cuMemcpyHtoDAsync_v2(u64 d,const void *h,size_t b,void *s){memcpy((void*)d,h,b);return 0;}
CUresult cuMemcpyDtoH_v2(void *h,u64 d,size_t b){memcpy(h,(void*)d,b);return 0;}
CUresult cuMemcpyDtoHAsync_v2(void *h,u64 d,size_t b,void *s){memcpy(h,(void*)d,b);return 0;}
CUresult cuMemcpyDtoDAsync_v2(u64 a,u64 b,size_t n,void *s){return 0;}
CUresult cuMemsetD8Async(u64 d,unsigned char v,size_t n,void *s){memset((void*)d,v,n);return 0;}
CUresult cuMemsetD8_v2(u64 d,unsigned char v,size_t n){memset((void*)d,v,n);return 0;}
CUresult cuModuleLoadData(void **m,const void *img){*m=malloc(8);return 0;}
CUresult cuModuleLoadDataEx(void **m,const void *img,unsigned n,void *o,void **v){*m=malloc(8);return 0;}
CUresult cuModuleGetFunction(void **f,void *m,const char *name){*f=malloc(8);return 0;}
CUresult cuModuleUnload(void *m){return 0;}
CUresult cuFuncGetAttribute(int *v,int a,void *f){*v=(a==0)?256:64;return 0;}
CUresult cuFuncSetAttribute(void *f,int a,int v){return 0;}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n,void *f,int b,size_t s){*n=2;return 0;}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n,void *f,int b,size_t s,unsigned fl){*n=2;return 0;}
static volatile u64 launches;
CUresult cuLaunchKernel(void *f,unsigned gx,unsigned gy,unsigned gz,unsigned bx,unsigned by,unsigned bz,unsigned sh,void *s,void **p,void **e){launches++;return 0;}
CUresult cuPointerGetAttribute(void *d,int a,u64 p){*(int*)d=0;return 0;}
CUresult cuMemGetAddressRange_v2(u64 *b,size_t *s,u64 p){*b=p;*s=(size_t)1<<40;return 0;}
CUresult cuDeviceCanAccessPeer(int *c,int a,int b){*c=1;return 0;}
CUresult cuDeviceGetP2PAttribute(int *v,int a,int x,int y){*v=1;return 0;}
CUresult cuCtxEnablePeerAccess(void *c,unsigned f){return 0;}
CUresult cuGetErrorString(int e,const char **s){*s="stub";return 0;}
CUresult cuGetErrorName(int e,const char **s){*s="STUB";return 0;}
CUresult cuStreamQuery(void *s){return 0;}
CUresult cuCtxPushCurrent_v2(void *c){current=c;return 0;}
CUresult cuCtxPopCurrent_v2(void **c){if(c)*c=current;return 0;}
CUresult cuDeviceGetUuid_v2(void *u,int d){memset(u,0,16);return 0;}
CUresult cuDeviceGetPCIBusId(char *b,int l,int d){strncpy(b,"0000:00:00.0",l);return 0;}
CUresult cuCtxGetApiVersion(void *c,unsigned *v){*v=13000;return 0;}
CUresult cuCtxGetFlags(unsigned *f){*f=0;return 0;}
CUresult cuCtxSetFlags(unsigned f){return 0;}
CUresult cuMemGetInfo_v2(size_t *f,size_t *t){*f=*t=(size_t)80<<30;return 0;}
