"""Every method of fedclust; one file each. Importing them here lets configs name a method by its class
name alone (`method: {class_path: CCFC}`)."""

from fedclust.contract import FederatedMethod, Stage
from fedclust.methods.cc import CC
from fedclust.methods.ccfc import CCFC
from fedclust.methods.ccfcpp import CCFCPlusPlus
from fedclust.methods.clustergan_fedavg import ClusterGANFedAvg
from fedclust.methods.fcm import FCM
from fedclust.methods.fedbyolcc import FedBYOLCC
from fedclust.methods.fedcc import FedCC
from fedclust.methods.fedmcc import FedMCC
from fedclust.methods.fedpnp import FedPNP
from fedclust.methods.fedspectral import FedSpectral
from fedclust.methods.fedu_kmeans import FedUKMeans
from fedclust.methods.fedu_mcc import FedUMCC
from fedclust.methods.ffcm import FFCM
from fedclust.methods.kfed import KFED
from fedclust.methods.kmeans import KMeans
from fedclust.methods.mcc import MCC
from fedclust.methods.ppfc_gan import PPFCGAN
from fedclust.methods.sdafc import SDAFC
from fedclust.methods.single_simclr import SingleSimCLR
from fedclust.methods.uifca import UIFCA

__all__ = ["FederatedMethod", "Stage", "CCFC", "CCFCPlusPlus", "KFED", "KMeans", "FCM", "FFCM", "ClusterGANFedAvg",
           "UIFCA",
           "SDAFC", "PPFCGAN", "FedCC", "FedPNP", "SingleSimCLR", "CC",
           "FedMCC", "MCC", "FedUKMeans", "FedUMCC", "FedBYOLCC", "FedSpectral"]
